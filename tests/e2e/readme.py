"""README.md read as a script: the quick-start command, the walkthrough's shell commands and the
responses it shows, and a matcher for those responses.

The README abbreviates long responses with `…`; `parse_shown` turns such a response into JSON
with a wildcard where each `…` stands, and `mismatches` compares it with an actual response:

- `{…}`, `[…]`: any object, any array;
- `…` among an object's members: any further members (`{"state":"Ongoing",…,"partitions":[…]}`);
- `…` among an array's elements: any run of elements, an empty one too;
- `"key":…`: any value;
- `…` inside a string: any run of characters (`"orders/0, …"`).

A response shown without `…` must also be the actual text but for its times (`text_mismatch`):
the spaces inside a fetched record's value are the producer's.

Times (TIME_FIELDS) differ on every run: they must be numbers where the README shows a number
(null where it shows null). Everything else is compared exactly, types included (`11` is not
`11.0`, `1` is not `true`).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

ELLIPSIS = "\u2026"
# What a bare `…` becomes in the parsed JSON; a NUL cannot appear in the README's own strings.
WILDCARD = "\x00" + ELLIPSIS
TIME_FIELDS = frozenset({"txn_started_ms", "updated_ms", "committed_ms", "age_ms", "timestamp_ms"})

QUICK_START = "Quick start"
WALKTHROUGH = "One transaction, step by step"


@dataclass(frozen=True)
class Step:
    """One `$ …` command of a console block, as written (continuation lines included), and the
    response the README shows under it."""

    command: str
    shown: str


# --- README structure -----------------------------------------------------------------------------


def section(readme: str, title: str) -> str:
    """The text under the level-2 heading `title`, up to the next level-2 heading outside a
    fenced block."""
    lines = readme.splitlines()
    try:
        start = lines.index(f"## {title}") + 1
    except ValueError:
        raise LookupError(f"README has no section '## {title}'") from None
    out: list[str] = []
    fenced = False
    for line in lines[start:]:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            break
        out.append(line)
    return "\n".join(out) + "\n"


def indented_blocks(text: str) -> list[str]:
    """Markdown's indented code blocks (four spaces, after a blank line), dedented."""
    blocks: list[list[str]] = []
    previous_blank = True
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("    ") and (current is not None or previous_blank):
            if current is None:
                current = []
                blocks.append(current)
            current.append(line[4:])
        elif not line.strip() and current is not None:
            current.append("")
        else:
            current = None
        previous_blank = not line.strip()
    return ["\n".join(b).strip("\n") for b in blocks]


def quick_start_command(readme: str) -> str:
    """The first code block of the Quick start: the command that starts the service."""
    blocks = indented_blocks(section(readme, QUICK_START))
    if not blocks:
        raise LookupError("the Quick start has no indented code block")
    return blocks[0]


def shell_variables(text: str) -> dict[str, str]:
    """`NAME=value` lines of the indented code blocks, by name, each line as written."""
    found = {}
    for block in indented_blocks(text):
        for line in block.splitlines():
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)=\S", line)
            if m:
                found[m.group(1)] = line
    return found


def _complete(command: str) -> bool:
    """Whether a shell command ends here: no quote left open, no trailing backslash."""
    try:
        shlex.split(command)
    except ValueError:
        return False
    return True


def console_steps(text: str) -> list[Step]:
    """Every `$ ` command of the ```console blocks in `text`, with the lines under it."""
    steps: list[Step] = []
    in_console = False
    command: list[str] | None = None
    shown: list[str] = []

    def flush() -> None:
        nonlocal command, shown
        if command is not None:
            steps.append(Step("\n".join(command), "\n".join(shown).strip()))
        command, shown = None, []

    for line in text.splitlines():
        if line.startswith("```"):
            if in_console:
                flush()
            in_console = line.strip() == "```console" and not in_console
            continue
        if not in_console:
            continue
        if command is not None and not _complete("\n".join(command)):
            command.append(line)
        elif line.startswith("$ "):
            flush()
            command = [line[2:]]
        elif command is not None:
            shown.append(line)
    flush()
    return steps


def count_prompts(text: str, program: str) -> int:
    """Lines that start with `$ program`: a count of the commands that owes nothing to
    console_steps."""
    return len(re.findall(rf"^\$ {re.escape(program)}\b", text, flags=re.MULTILINE))


# --- the shown responses --------------------------------------------------------------------------


def parse_shown(text: str) -> Any:
    """A response as the README shows it, as JSON; each bare `…` becomes WILDCARD (a value, an
    array element, or the key of an object member `WILDCARD: null`)."""
    out: list[str] = []
    containers: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            containers.append(ch)
        elif ch in "}]" and containers:
            containers.pop()
        elif ch == ELLIPSIS:
            before = "".join(out).rstrip()[-1:]
            member = containers[-1:] == ["{"] and before != ":"
            out.append(json.dumps(WILDCARD) + (":null" if member else ""))
            continue
        out.append(ch)
    return json.loads("".join(out))


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _string_matches(shown: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in shown.split(ELLIPSIS))
    return re.fullmatch(pattern, actual, flags=re.DOTALL) is not None


def _elements_match(shown: list[Any], actual: list[Any]) -> bool:
    """Arrays with WILDCARD elements, each standing for any run of elements."""
    if not shown:
        return not actual
    head, rest = shown[0], shown[1:]
    if head == WILDCARD:
        return any(_elements_match(rest, actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and not mismatches(head, actual[0]) and _elements_match(rest, actual[1:])


_TIME_MEMBER = re.compile(r'"(' + "|".join(sorted(TIME_FIELDS)) + r')":\d+')


def text_mismatch(shown: str, actual: str) -> str | None:
    """Where a response the README shows whole (no `…`) differs from the actual text, times
    aside; None if they agree or the README abbreviates it. Equal JSON is not enough: a
    record's value is fetched as the text its producer sent (app/api/fetched.py), so the README's
    `{"amount":9.5}` for a value sent as `{"amount": 9.5}` matches as JSON and is not what a
    reader sees."""
    if ELLIPSIS in shown:
        return None
    a, b = (_TIME_MEMBER.sub(r'"\1":0', t.strip()) for t in (shown, actual))
    if a == b:
        return None
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"the text differs at character {at}: README {a[at - 30:at + 30]!r}, actual {b[at - 30:at + 30]!r}"


def mismatches(shown: Any, actual: Any, path: str = "$", key: str | None = None) -> list[str]:
    """Where `actual` differs from `shown` (parsed by parse_shown), one line each; [] if it
    matches."""
    if shown == WILDCARD:
        return []
    if key in TIME_FIELDS and _is_number(shown):
        return [] if _is_number(actual) else [f"{path}: a time, a number, expected; got {actual!r}"]
    if isinstance(shown, dict):
        if not isinstance(actual, dict):
            return [f"{path}: an object expected; got {actual!r}"]
        out = []
        for k, v in shown.items():
            if k == WILDCARD:
                continue
            if k not in actual:
                out.append(f"{path}.{k}: missing")
            else:
                out.extend(mismatches(v, actual[k], f"{path}.{k}", k))
        if WILDCARD not in shown:
            out.extend(f"{path}.{k}: not in the README" for k in actual if k not in shown)
        return out
    if isinstance(shown, list):
        if not isinstance(actual, list):
            return [f"{path}: an array expected; got {actual!r}"]
        if WILDCARD in shown:
            return [] if _elements_match(shown, actual) else [f"{path}: {actual!r} does not match {shown!r}"]
        if len(shown) != len(actual):
            return [f"{path}: {len(shown)} elements expected; got {len(actual)}: {actual!r}"]
        out = []
        for i, (s, a) in enumerate(zip(shown, actual)):
            out.extend(mismatches(s, a, f"{path}[{i}]"))
        return out
    if isinstance(shown, str) and isinstance(actual, str) and ELLIPSIS in shown:
        return [] if _string_matches(shown, actual) else [f"{path}: {actual!r} does not match {shown!r}"]
    if type(shown) is not type(actual) or shown != actual:
        return [f"{path}: {shown!r} expected; got {actual!r}"]
    return []
