"""The desired state of each operation, as a fingerprint of what it was asked to do.

Drift is corrective when the node moved away from what was applied, intentional when what is
asked changed since. Telling them apart needs both sides: every operation records the hash of
its arguments when it runs (plan or apply), and each apply stores those hashes on the node
(engine/applied.py). Same hash, yet the operation would change something: the node moved.
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from pyinfra import host
from pyinfra.api import StringCommand
from pyinfra.api import operation as pyinfra_operation
from pyinfra.context import ctx_state

from rdmaprov.builds.spec import RecipeSettings
from rdmaprov.engine.factcache import FactNeeded, mark_current_host_changed
from rdmaprov.engine.notes import current_notes


def _json_default(value: object) -> object:
    """Bytes (a shipped program) by their sha256, not their repr: as stable, and far shorter; a
    build recipe's settings as the mapping they replaced (builds/spec.RecipeSettings); a
    read-only mapping as the mapping it shows."""
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    if isinstance(value, RecipeSettings):
        return value.fingerprinted()
    if isinstance(value, MappingProxyType):
        return dict(value)
    return repr(value)


def _encoded(value: object, shared: dict[int, tuple[object, str]] | None) -> str:
    """One argument as JSON. A tuple or read-only mapping cannot change, and a deploy passes the
    same one to every node (the cluster-wide lists of ssh_trust, n long): encoded once per run,
    not once per node, which made n nodes cost n² (bench/RESULTS.md, 1,000 hosts)."""
    if shared is None or not isinstance(value, (tuple, MappingProxyType)):
        return json.dumps(value, sort_keys=True, default=_json_default)
    known = shared.get(id(value))
    if known is None or known[0] is not value:
        known = shared[id(value)] = (value, json.dumps(value, sort_keys=True, default=_json_default))
    return known[1]


def fingerprint(args: tuple, kwargs: dict[str, object], shared: dict[int, tuple[object, str]] | None = None) -> str:
    """A stable hash of an operation's arguments (order of keyword arguments does not matter).

    The text hashed is `json.dumps([list(args), kwargs], sort_keys=True)`, put together argument
    by argument so `shared` (the run's encodings, engine/run_context.RunNotes) can hold the
    unchanging ones; the fingerprints nodes recorded before stay the same."""
    positional = ", ".join(_encoded(value, shared) for value in args)
    keywords = ", ".join(f"{json.dumps(key)}: {_encoded(kwargs[key], shared)}" for key in sorted(kwargs))
    text = f"[[{positional}], {{{keywords}}}]"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def executing() -> bool:
    return ctx_state.isset() and bool(getattr(ctx_state.get(), "is_executing", False))


def operation(**options: Any) -> Callable:
    """pyinfra's `@operation()`, recording the operation's fingerprint whenever it is evaluated."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def recorded(*args: Any, **kwargs: Any):
            notes = current_notes()
            if notes is not None and host.current_op_hash:
                notes.desired[(host.name, host.current_op_hash)] = fingerprint(args, kwargs, notes.encoded)
            changing = False
            try:
                for command in func(*args, **kwargs):
                    if not changing:
                        changing = True
                        mark_current_host_changed()
                    yield command
            except FactNeeded:
                raise
            except Exception as exc:
                if not executing():
                    raise  # planning and checks report it as this host's failure
                # pyinfra lets an exception from a running operation end the whole run: fail
                # this host's operation instead, with the reason as its error output.
                yield StringCommand(f"echo {shlex.quote('rdmaprov: ' + (str(exc) or type(exc).__name__))} >&2; exit 1")

        return pyinfra_operation(**options)(recorded)

    return decorate
