"""The shared vocabulary moved to ``common/``; the old import paths still give the same objects.

``storage.errors``, ``storage.shapes``, ``runtime.wire``,
``storage.openai_items``, ``storage.openai_session`` and
``storage.transcript_summary`` are re-export modules now. A name imported
from an old path must be the very object of :mod:`common` (an error raised
from one is caught as the other; ``LATEST_LEAF`` stays one sentinel), and
importing an old path warns about nothing (the suite turns warnings into
errors, and users' suites may too).
"""

from __future__ import annotations

import importlib
import inspect
import json

import pytest

from tests.support.processes import run_fresh_python

#: Old module -> where it lives now.
MOVED = {
    "storage.errors": "common.errors",
    "storage.shapes": "common.shapes",
    "runtime.wire": "common.wire",
    "storage.openai_items": "common.openai_items",
    "storage.openai_session": "common.openai_session",
    "storage.transcript_summary": "common.transcript_summary",
}

#: What each old module exported (its ``__all__``, or for ``storage.errors``, which had none, its classes)
#: before the move: every one must keep working.
EXPORTED_BEFORE = {
    "storage.errors": [
        "ActorBusyError", "ActorOverloadedError", "ActorRuntimeError", "ActorStorageCorruptError", "CompactionError",
        "ConflictError", "ContextBlockError", "DataFolderLockedError", "DatabaseError", "DurableSessionsError",
        "HostClosedError", "HttpError", "InternalServerError", "InvalidActorIdError", "InvalidArgumentsError",
        "InvalidInputError", "InvalidMessageError", "InvalidNamespaceError", "MessageNotFoundError",
        "MethodNotAllowedError", "NotFoundError", "NotOwnerError", "NotSupportedError", "OriginNotAllowedError",
        "OwnerUnreachableError", "OwnershipLostError", "PayloadTooLargeError", "RequestTimeoutError", "RestoreError",
        "RouteNotFoundError", "SchemaTooNewError", "SearchQueryError", "ServerBusyError", "ServiceUnavailableError",
        "SessionError", "SessionNotFoundError", "SkillRestoreError", "StorageClosedError", "StorageError",
        "StorageFullError", "StorageUnavailableError", "TransactionLeftOpenError", "UnauthorizedError",
        "UnknownMethodError", "UnknownNamespaceError", "UnsupportedMediaTypeError",
    ],
    "storage.shapes": ["LATEST_LEAF", "MAIN_SUBPATH", "OVERLAY_PREFIX", "encode_entry", "parse_session_key"],
    "runtime.wire": [
        "CLOSE_RECONNECT", "DEFAULT_MAX_BODY_BYTES", "HOP_HEADER", "JSON", "LATEST_LEAF", "MAIN_SUBPATH",
        "MAX_SESSION_ID_BYTES", "MSGPACK", "OWNER_HEADER", "SESSIONS_PREFIX", "TRANSCRIPTS_PREFIX", "check_session_id",
        "decode_body", "encode_body", "encode_entry", "error_from_payload", "error_payload", "media_type",
        "parse_session_key", "payload_for", "quote_segment", "status_of", "unquote_segment",
    ],
    "storage.openai_items": [
        "CALLS", "CONTENT_PART", "FORMAT_KEY", "FORMAT_VERSION", "GROUP_MAX_BYTES", "ITEM_PART", "AddPlan", "CallShape",
        "View", "items_of", "message_views", "needs_leaf", "plan_add", "plan_pop",
    ],
    "storage.openai_session": ["AgentsItemsSession", "MessageTarget", "TARGET_METHODS", "ThreadSafeLock"],
    "storage.transcript_summary": ["FIRST_PROMPT_MAX_CHARS", "fold_session_summary"],
}


@pytest.mark.parametrize("old", list(MOVED))
def test_every_name_the_old_module_exported_is_the_same_object_in_common(old):
    old_module, new_module = importlib.import_module(old), importlib.import_module(MOVED[old])
    assert sorted(old_module.__all__) == sorted(EXPORTED_BEFORE[old])  # the old path keeps exactly today's names
    assert set(EXPORTED_BEFORE[old]) <= set(new_module.__all__)  # names added since live in common only
    different = [name for name in EXPORTED_BEFORE[old] if getattr(old_module, name) is not getattr(new_module, name)]
    assert different == []


def test_the_old_errors_module_holds_every_class_of_the_tree():
    """``common.errors.__all__`` (and so the re-export) leaves no error class out."""
    import common.errors

    classes = sorted(name for name, value in vars(common.errors).items()
                     if inspect.isclass(value) and issubclass(value, common.errors.DurableSessionsError))
    assert classes == sorted(common.errors.__all__)


def test_an_error_raised_from_common_is_caught_by_its_old_name():
    import common.errors
    import storage.errors

    assert storage.errors.NotOwnerError is common.errors.NotOwnerError
    with pytest.raises(storage.errors.NotOwnerError) as caught:
        raise common.errors.NotOwnerError("sessions/ab12", "http://10.0.0.2:8787", owner_host="n2")
    assert (caught.value.owner_url, caught.value.status, caught.value.retryable) == ("http://10.0.0.2:8787", 503, True)


def test_the_sentinel_and_the_private_names_still_imported_from_old_paths_are_shared():
    import common.shapes
    import runtime.wire
    import storage.shapes

    assert storage.shapes.LATEST_LEAF is runtime.wire.LATEST_LEAF is common.shapes.LATEST_LEAF
    # storage/messages.py imports _LatestLeaf from storage.shapes until its imports move to common.
    assert storage.shapes._LatestLeaf is common.shapes._LatestLeaf


def test_importing_an_old_path_warns_about_nothing():
    code = ("import json, warnings\n"
            "warnings.simplefilter('error')\n"
            f"import {', '.join(MOVED)}\n"
            "print(json.dumps('ok'))")
    assert json.loads(run_fresh_python(code)) == "ok"
