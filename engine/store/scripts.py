"""The engine's Lua scripts (engine/store/*.lua), read from the package.

:func:`load` gives a script's text (for ``register_script``: EVALSHA after its first call);
:func:`sent_by_eval` gives it as a script sent whole by EVAL (a fenced write in a pipeline, which
a node that lacks the script still runs): its comment-only lines left empty
(:func:`without_comment_lines`); :func:`sha` names such a text for EVALSHA.
"""

from __future__ import annotations

import hashlib
import importlib.resources


def load(name: str) -> str:
    """The text of ``engine/store/<name>``."""
    return importlib.resources.files("engine.store").joinpath(name).read_text(encoding="utf-8")


def sent_by_eval(name: str) -> str:
    """``engine/store/<name>`` as an EVAL sends it: :func:`without_comment_lines`."""
    return without_comment_lines(load(name))


def sha(script: str) -> str:
    """The SHA1 that EVALSHA names ``script`` by.

    >>> sha("return 1")
    'e0e1f9fabfc9d4800c877a703b823ac0578ff8db'
    """
    return hashlib.sha1(script.encode("utf-8")).hexdigest()


def without_comment_lines(script: str) -> str:
    """A Lua script as it is sent: each line that is only a comment left empty (its line
    numbers kept for Lua's error messages).  An EVAL sends the script's text every time and
    the server hashes all of it; publish.lua's documentation is two thirds of its bytes.

    >>> lines = ["-- doc", "  -- more", "local a = '--x' -- why", "return a", ""]
    >>> without_comment_lines("\\n".join(lines)).splitlines()
    ['', '', "local a = '--x' -- why", 'return a']
    >>> without_comment_lines("--[[ a\\nb ]]\\nreturn 1") == "--[[ a\\nb ]]\\nreturn 1"
    True
    >>> without_comment_lines("local s = [[\\n-- kept\\n]]\\nreturn s") == "local s = [[\\n-- kept\\n]]\\nreturn s"
    True

    A script with a long bracket anywhere (a block comment ``--[[``, a long string ``[[`` or
    ``[==[``) is sent whole: a line inside one that starts with ``--`` is not a comment.
    """
    lines = script.splitlines(keepends=True)
    if any("[[" in line or "[=" in line for line in lines):  # a long bracket: sent whole
        return script
    return "".join("\n" if line.lstrip().startswith("--") else line for line in lines)
