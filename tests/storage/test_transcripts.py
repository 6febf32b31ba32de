"""TranscriptFile and TranscriptCatalog: the synchronous transcript storage."""

import json

import apsw
import pytest

from storage import SqlStorage
from storage.transcripts import (
    CATALOG_MIGRATIONS,
    TranscriptCatalog,
    TranscriptFile,
    encode_entry,
    parse_session_key,
    session_file_id,
)

SUB = "subagents/agent-1"


@pytest.fixture
def file(tmp_path):
    storage = SqlStorage.open(tmp_path / "actor.sqlite3")
    yield TranscriptFile(storage)
    storage.close()


class FakeClock:
    """Epoch-ms clock the test moves by hand."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock():
    return FakeClock(1_700_000_000_000)


@pytest.fixture
def catalog(tmp_path, clock):
    cat = TranscriptCatalog.open(tmp_path / "catalog.sqlite3", clock_ms=clock)
    yield cat
    cat.close()


def entry(uuid=None, **fields):
    e = {"type": "user", **fields}
    if uuid is not None:
        e["uuid"] = uuid
    return e


# -- TranscriptFile ---------------------------------------------------------


def test_load_of_a_never_written_subpath_is_none_not_empty(file):
    assert file.load("") is None
    file.append("", [entry("a")])
    assert file.load(SUB) is None


def test_entries_come_back_deep_equal_in_append_order(file):
    batch = [
        entry("b", message={"content": [{"type": "text", "text": "héllo ✓"}]}, n=1.5, ok=True, none=None),
        entry("a", nested={"z": [1, 2, {"y": "x"}], "a": {}}),
        entry(None, customTitle="no uuid"),
    ]
    file.append("", batch[:2])
    file.append("", batch[2:])
    assert file.load("") == batch


def test_load_json_is_the_compact_json_array_of_load(file):
    assert file.load_json("") is None
    batch = [entry("b", text="日本", n=[1, {"x": None}]), entry(None, customTitle="t")]
    file.append("", batch)
    assert file.load_json("") == json.dumps(batch, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(file.load_json("")) == file.load("") == batch
    assert file.load_json(SUB) is None


def test_entries_are_stored_as_compact_json_text(file):
    file.append("", [entry("a", text="ü", n=1)])
    assert file.storage.scalar("SELECT entry FROM transcript_entries") == '{"type":"user","text":"ü","n":1,"uuid":"a"}'


def test_appending_the_same_batch_twice_stores_it_once(file):
    batch = [entry("u1", n=1), entry("u2", n=2)]
    assert file.append("", batch) == batch
    assert file.append("", batch) == []
    assert file.load("") == batch
    assert file.count("") == 2


def test_a_retried_batch_with_new_entries_stores_only_the_new_ones(file):
    file.append("", [entry("u1")])
    stored = file.append("", [entry("u1"), entry("u2"), entry("u2", dup=True)])
    assert stored == [entry("u2")]
    assert [e["uuid"] for e in file.load("")] == ["u1", "u2"]


def test_an_empty_batch_writes_nothing(file):
    assert file.append("", []) == []
    assert file.load("") is None
    assert file.count() == 0


def test_entries_without_uuid_are_never_deduplicated(file):
    file.append("", [entry(None, tag="x"), entry(None, tag="x")])
    file.append("", [entry(None, tag="x")])
    assert file.load("") == [entry(None, tag="x")] * 3


def test_a_non_string_uuid_does_not_deduplicate(file):
    file.append("", [entry(7), entry(7)])
    assert file.count("") == 2


def test_the_same_uuid_under_two_subpaths_is_two_entries(file):
    file.append("", [entry("u1", where="main")])
    file.append(SUB, [entry("u1", where="sub")])
    assert file.load("") == [entry("u1", where="main")]
    assert file.load(SUB) == [entry("u1", where="sub")]


def test_a_bad_entry_stores_nothing_of_its_batch(file):
    with pytest.raises(ValueError, match=r"entries\[1\] must be a JSON object, not list"):
        file.append("", [entry("a"), ["not", "an", "object"]])
    with pytest.raises(ValueError, match=r"entries\[0\] is not JSON: Out of range float values"):
        file.append("", [entry("b", n=float("nan"))])
    with pytest.raises(ValueError, match=r"entries\[0\] is not JSON: Object of type set"):
        file.append("", [entry("c", s={1})])
    assert file.load("") is None


def test_a_failed_insert_rolls_the_whole_batch_back(file):
    file.append("other", [entry("first")])  # the table is made by the first append
    file.storage.exec(
        "CREATE TRIGGER refuse BEFORE INSERT ON transcript_entries WHEN NEW.uuid = 'bad' "
        "BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    with pytest.raises(apsw.ConstraintError, match="refused"):
        file.append("", [entry("ok1"), entry("bad")])
    assert file.load("") is None


def test_subpath_must_be_a_string(file):
    with pytest.raises(ValueError, match="subpath must be a string, not NoneType"):
        file.append(None, [entry("a")])
    with pytest.raises(ValueError, match="subpath must be a string, not int"):
        file.load(3)


def test_list_subkeys_lists_sub_transcripts_sorted_without_main(file):
    assert file.list_subkeys() == []
    file.append("", [entry("m")])
    assert file.list_subkeys() == []
    for sub in ("subagents/agent-b", "subagents/agent-a", "subagents/agent-b", "z"):
        file.append(sub, [entry(None)])
    assert file.list_subkeys() == ["subagents/agent-a", "subagents/agent-b", "z"]


def test_deleting_the_session_deletes_its_sub_transcripts(file):
    file.append("", [entry("m")])
    file.append(SUB, [entry("s")])
    assert file.delete() == 2
    assert file.load("") is None and file.load(SUB) is None
    assert file.list_subkeys() == []


def test_deleting_the_main_subpath_cascades_like_the_sdk(file):
    file.append("", [entry("m")])
    file.append(SUB, [entry("s")])
    assert file.delete("") == 2
    assert file.count() == 0


def test_deleting_one_sub_transcript_keeps_the_rest(file):
    file.append("", [entry("m")])
    file.append(SUB, [entry("s1"), entry("s2")])
    file.append("subagents/agent-2", [entry("s")])
    assert file.delete(SUB) == 2
    assert file.load(SUB) is None
    assert file.load("") == [entry("m")]
    assert file.list_subkeys() == ["subagents/agent-2"]


def test_a_deleted_uuid_can_be_appended_again(file):
    file.append("", [entry("m")])
    file.delete()
    assert file.append("", [entry("m")]) == [entry("m")]


def test_append_inside_an_outer_transaction_rolls_back_with_it(file):
    with pytest.raises(RuntimeError):
        with file.storage.transaction():
            file.append("", [entry("a")])
            raise RuntimeError("caller failed")
    assert file.load("") is None


# -- keys -------------------------------------------------------------------


def test_parse_session_key_maps_a_missing_subpath_to_main():
    assert parse_session_key({"project_key": "p", "session_id": "s"}) == ("p", "s", "")
    assert parse_session_key({"project_key": "p", "session_id": "s", "subpath": None}) == ("p", "s", "")
    assert parse_session_key({"project_key": "p", "session_id": "s", "subpath": SUB}) == ("p", "s", SUB)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("p/s", "session key must be a mapping, not str"),
        ({"session_id": "s"}, "session key project_key must be a non-empty string, not None"),
        ({"project_key": "p", "session_id": ""}, "session key session_id must be a non-empty string, not ''"),
        ({"project_key": "p", "session_id": "s", "subpath": ""}, "subpath must be omitted or a non-empty string"),
        ({"project_key": "p", "session_id": "s", "subpath": 1}, "subpath must be omitted or a non-empty string"),
    ],
)
def test_parse_session_key_refuses_malformed_keys(key, message):
    with pytest.raises(ValueError, match=message):
        parse_session_key(key)


def test_session_file_id_is_unambiguous_and_never_a_path():
    assert session_file_id("a", "bc") != session_file_id("ab", "c")
    assert session_file_id("../..", "/etc/passwd") == session_file_id("../..", "/etc/passwd")
    assert len(session_file_id("p", "s")) == 64
    assert set(session_file_id("../..", "/etc/passwd")) <= set("0123456789abcdef")


def test_encode_entry_keeps_key_order_and_unicode():
    assert encode_entry({"b": 1, "a": "日本"}) == '{"b":1,"a":"日本"}'


# -- TranscriptCatalog ------------------------------------------------------


def test_catalog_lists_main_transcripts_per_project_with_mtime(catalog, clock):
    assert catalog.list_sessions("p") == []
    catalog.record_append("p", "s2", [entry("a")])
    clock.now_ms += 5
    catalog.record_append("p", "s1", [entry("b")])
    catalog.record_append("other", "s1", [entry("c")])
    assert catalog.list_sessions("p") == [
        {"session_id": "s1", "mtime": 1_700_000_000_005},
        {"session_id": "s2", "mtime": 1_700_000_000_000},
    ]
    assert catalog.mtime("other", "s1") == 1_700_000_000_006
    assert catalog.mtime("p", "nope") is None


def test_catalog_mtimes_strictly_increase_even_when_the_clock_stalls(catalog, clock):
    stamps = [catalog.record_append("p", "s", [entry(str(i))]) for i in range(3)]
    assert stamps == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_002]
    clock.now_ms = 1_000  # clock stepped back
    assert catalog.record_append("p", "t", []) == 1_700_000_000_003


def test_catalog_mtimes_keep_increasing_after_reopening(tmp_path, clock):
    path = tmp_path / "catalog.sqlite3"
    cat = TranscriptCatalog.open(path, clock_ms=clock)
    assert cat.record_append("p", "s", []) == clock.now_ms
    cat.close()
    cat = TranscriptCatalog.open(path, clock_ms=clock)
    assert cat.record_append("p", "t", []) == clock.now_ms + 1
    cat.close()


def test_catalog_summary_is_folded_across_batches_with_the_listing_mtime(catalog, clock):
    catalog.record_append(
        "p",
        "s",
        [
            entry("1", timestamp="2024-01-01T00:00:00.000Z", cwd="/w",
                  message={"content": "<command-name>/init</command-name>"}),
            entry("2", customTitle="first", message={"content": [{"type": "text", "text": "Fix the bug\nplease"}]}),
        ],
    )
    clock.now_ms += 10
    catalog.record_append("p", "s", [{"type": "tag", "tag": "v1", "customTitle": "second", "gitBranch": "main"}])
    assert catalog.list_session_summaries("p") == [
        {
            "session_id": "s",
            "mtime": 1_700_000_000_010,
            "data": {
                "is_sidechain": False,
                "created_at": 1_704_067_200_000,
                "cwd": "/w",
                "command_fallback": "/init",
                "first_prompt": "Fix the bug please",
                "first_prompt_locked": True,
                "custom_title": "second",
                "git_branch": "main",
                "tag": "v1",
            },
        }
    ]
    assert catalog.list_sessions("p") == [{"session_id": "s", "mtime": 1_700_000_000_010}]


def test_catalog_forget_removes_listing_and_summary(catalog):
    catalog.record_append("p", "s", [entry("a")])
    assert catalog.forget("p", "s") is True
    assert catalog.forget("p", "s") is False
    assert catalog.list_sessions("p") == []
    assert catalog.list_session_summaries("p") == []


def test_catalog_has_its_own_schema_ladder(catalog):
    assert catalog.storage.user_version == len(CATALOG_MIGRATIONS) == 1
    names = {r["name"] for r in catalog.storage.sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert names == {"transcript_sessions"}
