"""SqlStorage: commit and rollback callbacks, rolling back a transaction left open."""

import pytest

from storage import StorageClosedError


def record(events, name):
    return lambda: events.append(name)


def config_rows(storage):
    return storage.sql("SELECT key FROM assistant_config ORDER BY key")


def test_commit_and_rollback_callbacks_run_once_per_transaction(storage):
    events = []
    storage.on_commit(record(events, "commit"), key="t")
    storage.on_rollback(record(events, "rollback"), key="t")
    with storage.transaction():
        storage.exec("INSERT INTO assistant_config VALUES ('s', 'a', '1')")
        storage.exec("INSERT INTO assistant_config VALUES ('s', 'b', '1')")
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'c', '1')")  # autocommit: one more commit
    with pytest.raises(RuntimeError):
        with storage.transaction():
            storage.exec("INSERT INTO assistant_config VALUES ('s', 'd', '1')")
            raise RuntimeError("boom")
    assert events == ["commit", "commit", "rollback"]
    assert config_rows(storage) == [{"key": "a"}, {"key": "b"}, {"key": "c"}]


def test_a_savepoint_rolled_back_alone_is_not_a_rollback(storage):
    events = []
    storage.on_commit(record(events, "commit"), key="t")
    storage.on_rollback(record(events, "rollback"), key="t")
    with storage.transaction():
        storage.exec("INSERT INTO assistant_config VALUES ('s', 'outer', '1')")
        with pytest.raises(RuntimeError):
            with storage.transaction():
                storage.exec("INSERT INTO assistant_config VALUES ('s', 'inner', '1')")
                raise RuntimeError("inner only")
    assert events == ["commit"]
    assert config_rows(storage) == [{"key": "outer"}]


def test_callbacks_under_different_keys_all_run_and_a_key_is_replaced_or_removed(storage):
    events = []
    storage.on_commit(record(events, "a"), key="a")
    storage.on_commit(record(events, "b"), key="b")
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'k1', '1')")
    assert sorted(events) == ["a", "b"]
    events.clear()
    storage.on_commit(record(events, "a2"), key="a")
    storage.on_commit(None, key="b")
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'k2', '1')")
    assert events == ["a2"]


def test_the_commit_callbacks_return_value_does_not_veto(storage):
    storage.on_commit(lambda: True, key="t")  # apsw would roll back on a true return of its own hook
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'k', '1')")
    assert config_rows(storage) == [{"key": "k"}]


def test_rollback_undoes_a_transaction_left_open_and_tells_the_callback(storage):
    events = []
    storage.on_rollback(record(events, "rollback"), key="t")
    storage.exec("BEGIN")
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'left', '1')")
    assert storage.in_transaction
    assert storage.rollback() is True
    assert not storage.in_transaction
    assert events == ["rollback"]
    assert config_rows(storage) == []


def test_rollback_without_a_transaction_does_nothing(storage):
    events = []
    storage.on_rollback(record(events, "rollback"), key="t")
    storage.exec("INSERT INTO assistant_config VALUES ('s', 'kept', '1')")
    assert storage.rollback() is False
    assert events == []
    assert config_rows(storage) == [{"key": "kept"}]


def test_hooks_and_rollback_refuse_a_closed_storage(storage):
    storage.close()
    with pytest.raises(StorageClosedError):
        storage.on_commit(lambda: None, key="t")
    with pytest.raises(StorageClosedError):
        storage.on_rollback(lambda: None, key="t")
    with pytest.raises(StorageClosedError):
        storage.rollback()


def test_a_commit_callback_that_raises_turns_the_commit_into_a_rollback(storage):
    events = []

    def refuse():
        raise RuntimeError("refused by the callback")

    storage.on_commit(refuse, key="t")
    storage.on_rollback(record(events, "rollback"), key="t")
    with pytest.raises(RuntimeError, match="refused by the callback"):
        storage.exec("INSERT INTO assistant_config VALUES ('s', 'k', '1')")
    storage.on_commit(None, key="t")
    assert events == ["rollback"]
    assert config_rows(storage) == [] and not storage.in_transaction
