#!/usr/bin/env python3
"""Lists pairs of source files of one crate that import each other (imports run one way only).

A file "imports" another when it names an item of that file's module by a `crate::`, `super::`
or `self::` path (in a `use` or inline); inside an inline `mod tests { ... }` a `super::` names
the file itself. A parent's `mod child;` is not an import; its
`pub use child::X` is. Exits 1 when a pair is found that is not in KNOWN, or when a KNOWN pair
is gone (take it out then)."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["limiter", "admin-ui", "operator", "bench", "tests", "redis-module"]


# Pairs left from before the check (all untied since); none may be added.
KNOWN: set[str] = set()


def modules(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    found = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, name), src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and rel[0] == "bin":
                continue
            found[tuple(rel)] = os.path.join(dirpath, name)
    return found


def expand(tree):
    """`a::{b, c::{d}}` -> ["a::b", "a::c::d"]."""
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                prefix, inner = tree[:start], tree[start + 1 : i]
                parts, d, last = [], 0, 0
                for j, c in enumerate(inner):
                    d += c == "{"
                    d -= c == "}"
                    if c == "," and d == 0:
                        parts.append(inner[last:j])
                        last = j + 1
                parts.append(inner[last:])
                return [p for part in parts if part.strip() for p in expand(prefix + part.strip())]
    return [tree]


# One pass, so a `//` inside a string and a quote inside a comment are each read as what they are.
TOKENS = re.compile(
    r'//[^\n]*|/\*.*?\*/|\br(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|b?\'(?:\\.|[^\\\'])\'', re.S
)


def strip_comments_and_strings(text):
    return TOKENS.sub(lambda m: '""' if m.group(0)[0] in "rb\"'" else " ", text)


def inline_depths(text):
    """Start offsets of inline `mod name { ... }` blocks and their ends: (start, end) pairs."""
    spans = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            depth += text[i] == "{"
            depth -= text[i] == "}"
            if depth == 0:
                break
            i += 1
        spans.append((m.end(), i))
    return spans


def within_file(path, at, spans):
    """`path` as seen from the file's own module: inside an inline `mod tests { ... }`, a leading
    `super::` names the file itself, and `self::` the inline module (in the same file)."""
    depth = sum(start <= at < end for start, end in spans)
    parts = path.split("::")
    if depth and parts[0] == "self":
        return None
    while depth and parts and parts[0] == "super":
        parts.pop(0)
        depth -= 1
    if depth or not parts:
        return None  # an item of an enclosing inline module: this file
    return "::".join(parts if parts[0] in ("crate", "super") else ["self"] + parts)


def paths(text):
    text = strip_comments_and_strings(text)
    spans = inline_depths(text)
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        found += [(p, m.start()) for p in expand(re.sub(r"\s+", "", m.group(1)))]
    found += [(m.group(0), m.start()) for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", text)]
    # A child module named inline without `self::` (`memory::MemoryStore`); main() keeps only
    # those whose first segment is a child of the file.
    found += [(m.group(0), m.start()) for m in re.finditer(r"(?<![\w:])[a-z_]\w*(?:::\w+)+", text)]
    seen = []
    for path, at in found:
        inside = any(start <= at < end for start, end in spans)
        if not inside:
            seen.append(path)
            continue
        first = path.split("::")[0]
        if first == "crate":
            seen.append(path)
        elif first in ("super", "self"):
            local = within_file(path, at, spans)
            if local is not None:
                seen.append(local)
    return seen


def resolve(path, here, mods):
    parts = path.split("::")
    base = list(here)
    if parts[0] == "crate":
        base, parts = [], parts[1:]
    while parts and parts[0] in ("super", "self"):
        if parts.pop(0) == "super":
            base = base[:-1]
    full = base + [p for p in parts if p not in ("*",) and not p.startswith("self")]
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in mods:
            return tuple(full[:n])
    return None


def main():
    bad = []
    for crate in CRATES:
        mods = modules(os.path.join(ROOT, crate, "src"))
        edges = set()
        for here, file in mods.items():
            for path in paths(open(file, encoding="utf-8").read()):
                first = path.split("::")[0]
                if first not in ("crate", "super", "self"):
                    if here + (first,) not in mods:
                        continue
                    path = "self::" + path
                there = resolve(path, list(here), mods)
                if there is not None and there != here:
                    edges.add((here, there))
        for a, b in sorted(edges):
            if a < b and (b, a) in edges:
                bad.append(f"{crate}: {os.path.relpath(mods[a], ROOT)} <-> {os.path.relpath(mods[b], ROOT)}")
    new = [line for line in bad if line not in KNOWN]
    gone = sorted(KNOWN - set(bad))
    for line in new:
        print(f"import cycle: {line} (move what both use below both)")
    for line in gone:
        print(f"no longer a cycle, take it out of KNOWN in {__file__}: {line}")
    print(f"check-module-cycles: {len(bad)} known pairs left, {len(new)} new, {len(gone)} gone")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
