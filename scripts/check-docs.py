#!/usr/bin/env python3
"""Checks the project's Markdown documents, and writes the CRD reference.

Documents: README.md, docs/*.md, BENCHMARKS.md, CHANGELOG.md (when present) and the crates'
READMEs (*/README.md, clients/*/README.md). For each one:

  links     every relative link [x](path#anchor) names a file of the repository, and the anchor
            a heading of that file (GitHub's anchors: lower case, punctuation dropped, spaces as
            hyphens, -1, -2 for repeats) or an <a id="..."> in it;
  paths     every backticked path that starts with a top-level directory of the repository (or
            of the crate, in a crate's README), or names a top-level file, exists (a `*` in it:
            something matches); every Markdown file named by its bare name exists somewhere;
  commands  every command of a code block marked sh, bash, shell or console is an allowed
            external command, a shell keyword or builtin, a script under scripts/ that exists,
            or a binary the workspace builds (bare, or as target/release/NAME);
  words     no path outside the repository (../shared, /work/, home directories), and no word of
            work sessions, helpers or issue numbers.

docs/crd-reference.md is generated from crds/streamlimiter.yaml; the check fails when the
committed file differs from what would be generated. `--write` writes it.

Prints one summary line; exits 1 with `file:line: problem` lines when a check fails.
Python 3.11, standard library only (the CRD is read by the small YAML reader below, which takes
the block style the CRD generator writes and refuses anything else)."""
import glob
import json
import os
import re
import sys
import textwrap
import tomllib
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRD = "crds/streamlimiter.yaml"
CRD_REFERENCE = "docs/crd-reference.md"
SKIP_DIRS = {".git", "target", "node_modules"}

# Commands a shell block may run besides the workspace's binaries and scripts/: the tools the
# documents use, and the shell's keywords and builtins.
ALLOWED_COMMANDS = {
    # the tools the project runs and documents
    "cargo", "kubectl", "helm", "kind", "curl", "redis-cli", "redis-server", "valkey-server",
    "docker", "podman", "buildah", "skopeo", "git", "npm", "node", "python3", "jq", "openssl",
    "psql", "promtool",
    # shell keywords and builtins
    "export", "cd", "for", "do", "done", "if", "then", "else", "elif", "fi", "while", "until",
    "case", "esac", "echo", "read", "printf", "sleep", "kill", "wait", "set", "unset", "test",
    "true", "false", "source", ".", "exit", "trap", "time",
    # standard utilities
    "base64", "cat", "grep", "sed", "awk", "head", "tail", "sort", "wc", "tee", "xargs", "env",
    "timeout", "mkdir", "rm", "cp", "mv", "ls",
}
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}

OUTSIDE_PATTERNS = [
    (re.compile(r"\.\./shared\b"), "names a path outside the repository (../shared)"),
    (re.compile(r"/work/"), "names a path outside the repository (/work/)"),
    (re.compile(r"(?<![\w.])/(home|Users)/\w+"), "names a home directory"),
    (re.compile(r"\bshared design folder\b", re.I), "names a folder outside the repository"),
]
WORD_PATTERNS = [
    (re.compile(r"\bissues? #?\d+", re.I), "names an issue number"),
    (re.compile(r"\b(this|previous|earlier|next|prior|work|working) sessions?\b", re.I),
     "speaks of a work session"),
    (re.compile(r"\bhelpers?\b", re.I), "speaks of a helper"),
]


def rel(path):
    return os.path.relpath(path, ROOT)


# ----------------------------------------------------------------------------------------------
# The documents


def documents():
    names = ["README.md", "BENCHMARKS.md", "CHANGELOG.md"]
    names += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    names += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "*", "README.md")))
    names += sorted(rel(p) for p in glob.glob(os.path.join(ROOT, "clients", "*", "README.md")))
    seen = []
    for name in names:
        if name.split(os.sep)[0] in SKIP_DIRS or name in seen:
            continue
        if os.path.isfile(os.path.join(ROOT, name)):
            seen.append(name)
    return seen


FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([^`\s]*)")
FENCE_LINE = "\0fence"


def split_markdown(text):
    """Yields (line number, line, None) for prose, (line number, line, language) inside code
    blocks ("" when the fence names none), and (line number, line, FENCE_LINE) for fences."""
    fence = None
    language = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, language = m.group(2), m.group(3).lower()
            yield number, line, FENCE_LINE
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)) and \
                line.strip().strip(fence[0]) == "":
            fence = None
            yield number, line, FENCE_LINE
        elif fence is not None:
            yield number, line, language
        else:
            yield number, line, None


CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)


def without_code_spans(line):
    return CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def heading_anchors(text):
    """GitHub's anchors of the ATX headings of a document, and its <a id|name> anchors."""
    anchors = set()
    counts = {}
    for _, line, language in split_markdown(text):
        if language is not None:
            continue
        for m in re.finditer(r"<a\s+(?:id|name)=\"([^\"]+)\"", line):
            anchors.add(m.group(1))
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = slugify(m.group(2))
        if slug in counts:
            counts[slug] += 1
            anchors.add(f"{slug}-{counts[slug]}")
        else:
            counts[slug] = 0
            anchors.add(slug)
    return anchors


def slugify(heading):
    parts = re.split(r"(`+[^`]*`+)", heading)  # code spans keep their text as it is
    text = ""
    for k, part in enumerate(parts):
        if k % 2:
            text += part.strip("`")
        else:
            part = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", part)
            part = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", part)
            text += re.sub(r"<[^>]+>", "", part).replace("*", "")
    text = text.lower()
    kept = []
    for char in text:
        if char in "-_ " or unicodedata.category(char)[0] in "LNM":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


# ----------------------------------------------------------------------------------------------
# The repository: top-level names, Markdown file names, the workspace's binaries


def top_level(directory):
    try:
        entries = os.listdir(directory)
    except OSError:
        return set(), set()
    dirs = {e for e in entries if os.path.isdir(os.path.join(directory, e)) and e not in SKIP_DIRS}
    files = {e for e in entries if os.path.isfile(os.path.join(directory, e))}
    return dirs, files


def markdown_names():
    names = set()
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        names.update(f for f in filenames if f.endswith(".md"))
    return names


def workspace_members():
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as f:
        patterns = tomllib.load(f).get("workspace", {}).get("members", [])
    return sorted(rel(m) for p in patterns for m in glob.glob(os.path.join(ROOT, p))
                  if os.path.isfile(os.path.join(m, "Cargo.toml")))


def workspace_binaries(members):
    binaries = set()
    for member in (os.path.join(ROOT, m) for m in members):
        with open(os.path.join(member, "Cargo.toml"), "rb") as f:
            cargo = tomllib.load(f)
        package = cargo.get("package", {}).get("name")
        if package and os.path.isfile(os.path.join(member, "src", "main.rs")):
            binaries.add(package)
        binaries.update(b["name"] for b in cargo.get("bin", []) if "name" in b)
        binaries.update(os.path.basename(p)[:-3]
                        for p in glob.glob(os.path.join(member, "src", "bin", "*.rs")))
    return binaries


class Repository:
    def __init__(self):
        self.dirs, self.files = top_level(ROOT)
        self.dirs.discard("target")
        self.markdown = markdown_names()
        self.members = workspace_members()
        self.binaries = workspace_binaries(self.members)
        self.anchor_cache = {}

    def anchors(self, path):
        if path not in self.anchor_cache:
            with open(path, encoding="utf-8") as f:
                self.anchor_cache[path] = heading_anchors(f.read())
        return self.anchor_cache[path]


# ----------------------------------------------------------------------------------------------
# Checks


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)


def check_link(repo, doc, number, target, problems):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
        return  # a URL (http:, https:, mailto:)
    path, _, anchor = target.partition("#")
    if path:
        full = os.path.normpath(os.path.join(ROOT, os.path.dirname(doc), path))
        if not (full + os.sep).startswith(ROOT + os.sep):
            problems.append(f"{doc}:{number}: link {target} leaves the repository")
            return
        if not os.path.exists(full):
            problems.append(f"{doc}:{number}: link {target}: no such file {rel(full)}")
            return
    else:
        full = os.path.join(ROOT, doc)
    if anchor and full.endswith(".md") and os.path.isfile(full):
        if anchor not in repo.anchors(full):
            problems.append(f"{doc}:{number}: link {target}: {rel(full)} has no heading "
                            f"with the anchor #{anchor}")


PATH_WORD = re.compile(r"^[A-Za-z0-9_.\-/*]+$")


def path_candidates(span):
    for word in span.split():
        word = word.strip(",;()'\"")
        word = re.sub(r":\d+(-\d+)?$", "", word).split("#")[0]
        if word and PATH_WORD.match(word) and ".." not in word.replace("...", ""):
            yield word


def check_path(repo, doc, number, word, problems):
    crate = os.path.dirname(doc)
    in_crate = bool(crate) and crate != "docs"
    crate_dirs = top_level(os.path.join(ROOT, crate))[0] if in_crate else set()
    first = word.split("/")[0]
    if "/" in word and first in repo.dirs | crate_dirs:
        bases = [crate] if in_crate and first in crate_dirs else []
        bases.append("")
    elif "/" not in word and word in repo.files:
        bases = [""]
    elif "/" not in word and re.fullmatch(r"[A-Za-z0-9_-]+\.md", word):
        if word not in repo.markdown:
            problems.append(f"{doc}:{number}: `{word}`: no such file in the repository")
        return True
    else:
        return False
    # A crate's `tests/x.rs` or `src/x.rs` named in a document about that crate: any member.
    if first in ("src", "tests", "benches"):
        bases += repo.members
    for base in bases:
        candidate = os.path.join(ROOT, base, word)
        if "*" in word:
            if glob.glob(candidate):
                return True
        elif os.path.exists(candidate.rstrip("/")):
            return True
    problems.append(f"{doc}:{number}: `{word}`: no such path in the repository")
    return True


def check_words(doc, number, text, problems):
    """Words no document may hold; `text` may run over several lines from line `number`."""
    flat = text.replace("\n", " ")

    def at(offset):
        return number + text.count("\n", 0, offset)

    for pattern, message in OUTSIDE_PATTERNS + WORD_PATTERNS:
        for m in pattern.finditer(flat):
            problems.append(f"{doc}:{at(m.start())}: {message}: \"{m.group(0)}\"")
    for m in re.finditer(r"(?<![\w/.-])([A-Z][A-Za-z0-9_-]*\.md)\b", without_code_spans(flat)):
        if m.group(1) not in REPO.markdown:
            problems.append(f"{doc}:{at(m.start())}: {m.group(1)}: no such file in the repository")


# --- shell blocks ------------------------------------------------------------------------------


class Shell:
    """Splits a script into simple commands (lists of words), command substitutions included.
    Not a shell: enough of one to find each command's first word."""

    def __init__(self, text):
        self.text = text
        self.commands = []

    def run(self):
        self.parse(self.text)
        return self.commands

    def parse(self, text):
        words, word, quoted_word = [], [], False
        i, n = 0, len(text)

        def end_word():
            nonlocal word
            if word:
                words.append("".join(word))
                word = []

        def end_command():
            end_word()
            if words:
                self.commands.append(list(words))
                words.clear()

        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n:
                if text[i + 1] != "\n":
                    word.append(text[i + 1])
                i += 2
            elif c == "#" and not word:
                while i < n and text[i] != "\n":
                    i += 1
            elif c == "'":
                j = text.find("'", i + 1)
                j = n if j < 0 else j
                word.append(text[i + 1:j] or "''")
                i = j + 1
            elif c == '"':
                i = self.double_quoted(text, i + 1, word)
            elif text.startswith("$((", i):
                i = self.skip_balanced(text, i + 3, "((", "))")
                word.append("$N")
            elif text.startswith("$(", i):
                j = self.skip_balanced(text, i + 2, "(", ")")
                self.parse(text[i + 2:j - 1])
                word.append("$S")
                i = j
            elif c == "`":
                j = text.find("`", i + 1)
                j = n if j < 0 else j
                self.parse(text[i + 1:j])
                word.append("$S")
                i = j + 1
            elif text.startswith("${", i):
                j = text.find("}", i)
                j = n if j < 0 else j
                word.append(text[i:j + 1])
                i = j + 1
            elif c in " \t":
                end_word()
                i += 1
            elif c in "\n;&|(){}":
                end_command()
                i += 1
            elif c in "<>":
                end_word()
                while i < n and text[i] in "<>&0123456789":
                    i += 1
                while i < n and text[i] in " \t":
                    i += 1
                # the redirection's target is no command word
                start = i
                while i < n and text[i] not in " \t\n;&|()":
                    i += 1
                if not words:
                    words.append("")  # keeps the target from counting as the command
                words.append("<" + text[start:i])
            else:
                word.append(c)
                i += 1
        end_command()

    def double_quoted(self, text, i, word):
        n = len(text)
        while i < n and text[i] != '"':
            if text[i] == "\\" and i + 1 < n:
                word.append(text[i + 1])
                i += 2
            elif text.startswith("$(", i) and not text.startswith("$((", i):
                j = self.skip_balanced(text, i + 2, "(", ")")
                self.parse(text[i + 2:j - 1])
                word.append("$S")
                i = j
            else:
                word.append(text[i])
                i += 1
        return i + 1

    @staticmethod
    def skip_balanced(text, i, opening, closing):
        """The index after the `closing` that balances an `opening` already read (quotes
        skipped)."""
        depth, n = 1, len(text)
        while i < n:
            if text[i] == "'":
                j = text.find("'", i + 1)
                i = n if j < 0 else j + 1
                continue
            if text[i] == '"':
                i += 1
                while i < n and text[i] != '"':
                    i += 2 if text[i] == "\\" else 1
                i += 1
                continue
            if text.startswith(closing, i):
                depth -= 1
                i += len(closing)
                if depth == 0:
                    return i
                continue
            if text.startswith(opening, i):
                depth += 1
                i += len(opening)
                continue
            i += 1
        return n


KEYWORDS_BEFORE_COMMAND = {"do", "then", "else", "elif", "if", "while", "until", "!", "time",
                           "sudo", "exec", "command", "nohup"}
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_word(words):
    """The word a simple command runs: past assignments, keywords and `timeout DURATION`."""
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "" or word.startswith("<"):
            return None  # a bare redirection
        if ASSIGNMENT.match(word) or word in KEYWORDS_BEFORE_COMMAND:
            continue
        if word in ("for", "case", "select"):
            return None  # the rest is a word list, not a command
        if word == "timeout":
            skip = True
            continue
        return word
    return None


def command_allowed(repo, word):
    if word.startswith("$") or word in ALLOWED_COMMANDS or word in repo.binaries:
        return True
    path = word[2:] if word.startswith("./") else word
    if path.startswith("scripts/") or path.startswith(".ci/"):
        return os.path.isfile(os.path.join(ROOT, path))
    m = re.fullmatch(r"target/(?:release|debug)/([A-Za-z0-9_-]+)", path)
    return bool(m and m.group(1) in repo.binaries)


def check_shell_block(repo, doc, start, language, lines, problems):
    if language == "console":
        body = []
        for line in lines:
            m = re.match(r"^\s*\$\s+(.*)$", line)
            body.append(m.group(1) if m else "")
        text = "\n".join(body)
    else:
        text = "\n".join(lines)
    commands = 0
    for words in Shell(text).run():
        word = command_word(words)
        if word is None:
            continue
        commands += 1
        if not command_allowed(repo, word):
            number = start + next((k for k, l in enumerate(lines) if word in l), 0)
            problems.append(f"{doc}:{number}: `{word}` in a {language} block is neither a known "
                            f"command nor a script or binary of the workspace")
        for other in words[1:]:
            other = other.lstrip("<")
            if "/" in other and other.split("/")[0] in repo.dirs and PATH_WORD.match(other) \
                    and "*" not in other and not other.startswith("target/"):
                if not os.path.exists(os.path.join(ROOT, os.path.dirname(doc), other)) and \
                        not os.path.exists(os.path.join(ROOT, other)):
                    number = start + next((k for k, l in enumerate(lines) if other in l), 0)
                    problems.append(f"{doc}:{number}: {other}: no such path in the repository")
    return commands


# --- one document ------------------------------------------------------------------------------


def paragraphs(lines):
    """Groups prose lines (number, line) into runs that a code span or a link may cross: a blank
    line, a heading, a table row or a list item starts a new run."""
    run = []
    for number, line in lines:
        stripped = line.strip()
        starts = re.match(r"^(#{1,6}\s|\||[-*+]\s|\d+[.)]\s)", stripped)
        if run and (stripped == "" or starts or run[-1][1].strip().startswith(("#", "|"))):
            yield run[0][0], "\n".join(l for _, l in run)
            run = []
        if stripped:
            run.append((number, line))
    if run:
        yield run[0][0], "\n".join(l for _, l in run)


def check_prose(repo, doc, number, text, problems, counts):
    check_words(doc, number, text, problems)
    prose = without_code_spans(text)
    targets = [(m.start(), m.group(1)) for m in LINK.finditer(prose)]
    targets += [(m.start(), m.group(1)) for m in REFERENCE_LINK.finditer(prose)]
    for offset, target in targets:
        counts["links"] += 1
        check_link(repo, doc, number + text.count("\n", 0, offset), target, problems)
    for m in CODE_SPAN.finditer(text):
        line = number + text.count("\n", 0, m.start())
        for word in path_candidates(" ".join(m.group(2).split())):
            if check_path(repo, doc, line, word, problems):
                counts["paths"] += 1


def check_document(repo, doc, all_problems, counts):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        text = f.read()
    problems = []
    prose, block, block_start, block_language = [], [], 0, None
    for number, line, language in split_markdown(text):
        if language is None:
            prose.append((number, line))
            continue
        prose.append((number, ""))  # a code block ends a paragraph
        check_words(doc, number, line, problems)
        if language == FENCE_LINE:
            if block_language is None:
                block, block_start = [], number + 1
                m = FENCE.match(line)
                block_language = m.group(3).lower() if m else ""
            else:
                if block_language in SHELL_LANGUAGES:
                    counts["blocks"] += 1
                    counts["commands"] += check_shell_block(
                        repo, doc, block_start, block_language, block, problems)
                block_language = None
        else:
            block.append(line)
    for number, paragraph in paragraphs(prose):
        check_prose(repo, doc, number, paragraph, problems, counts)
    all_problems += sorted(problems, key=lambda p: int(p.split(":")[1]))


# ----------------------------------------------------------------------------------------------
# A small YAML reader: block mappings and sequences, literal and folded block scalars, plain,
# single- and double-quoted scalars, and the empty flow collections {} and []. Anything else is
# refused with its line, so a change of the CRD's form shows instead of a wrong reference.


class YamlError(Exception):
    pass


def load_yaml(text):
    lines = []
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.strip()
        if stripped == "" or stripped.startswith("#") or stripped == "---":
            lines.append((number, None, raw))
        else:
            if "\t" in raw[: len(raw) - len(raw.lstrip())]:
                raise YamlError(f"line {number}: a tab in the indentation")
            lines.append((number, len(raw) - len(raw.lstrip(" ")), raw))
    reader = _YamlReader(lines)
    i = reader.next_content(0)
    if i >= len(lines):
        return None
    value, i = reader.node(i, lines[i][1])
    i = reader.next_content(i)
    if i < len(lines):
        raise YamlError(f"line {lines[i][0]}: unexpected content")
    return value


class _YamlReader:
    def __init__(self, lines):
        self.lines = lines

    def next_content(self, i):
        while i < len(self.lines) and self.lines[i][1] is None:
            i += 1
        return i

    def content(self, i, indent):
        return self.lines[i][2][indent:]

    def node(self, i, indent, first=None):
        """The node whose first line is i at `indent`; `first` replaces that line's text (a
        mapping that starts on a sequence item's dash line)."""
        text = first if first is not None else self.content(i, indent)
        if text == "-" or text.startswith("- "):
            return self.sequence(i, indent, first)
        return self.mapping(i, indent, first)

    def sequence(self, i, indent, first=None):
        items = []
        while True:
            text = first if first is not None else self.content(i, indent)
            first = None
            if not (text == "-" or text.startswith("- ")):
                break
            rest = text[1:].lstrip(" ")
            if rest == "":
                j = self.next_content(i + 1)
                if j < len(self.lines) and self.lines[j][1] > indent:
                    value, i = self.node(j, self.lines[j][1])
                else:
                    value, i = None, i + 1
            elif self.is_mapping_entry(rest):
                inner = indent + (len(text) - len(rest))
                value, i = self.mapping(i, inner, rest)
            else:
                value, i = self.scalar_value(rest, i, indent)
            items.append(value)
            i = self.next_content(i)
            if i >= len(self.lines) or self.lines[i][1] != indent:
                break
        return items, i

    @staticmethod
    def is_mapping_entry(text):
        return _YamlReader.split_key(text) is not None

    @staticmethod
    def split_key(text):
        if text[:1] in ("'", '"'):
            quote = text[0]
            j = 1
            while j < len(text):
                if text[j] == quote:
                    if quote == "'" and text[j + 1:j + 2] == "'":
                        j += 2
                        continue
                    break
                j += 2 if (quote == '"' and text[j] == "\\") else 1
            key_text, rest = text[: j + 1], text[j + 1:]
            if not (rest == ":" or rest.startswith(": ")):
                return None
            return _YamlReader.quoted(key_text), rest[1:].strip()
        m = re.match(r"^([^#'\"{}\[\],&*!|>%@`][^:#]*?|[^:#]*?):( +|$)(.*)$", text)
        if not m or text.startswith("- "):
            return None
        return m.group(1), m.group(3).strip()

    def mapping(self, i, indent, first=None):
        result = {}
        while True:
            number = self.lines[i][0]
            text = first if first is not None else self.content(i, indent)
            first = None
            entry = self.split_key(text)
            if entry is None:
                raise YamlError(f"line {number}: expected `key: value`")
            key, rest = entry
            if key in result:
                raise YamlError(f"line {number}: key {key!r} twice")
            if rest == "":
                j = self.next_content(i + 1)
                if j < len(self.lines) and (self.lines[j][1] > indent or (
                        self.lines[j][1] == indent and self.content(j, indent).startswith("- "))):
                    value, i = self.node(j, self.lines[j][1])
                else:
                    value, i = None, i + 1
            elif rest[0] in "|>":
                value, i = self.block_scalar(rest, i, indent)
            else:
                value, i = self.scalar_value(rest, i, indent)
            result[key] = value
            i = self.next_content(i)
            if i >= len(self.lines) or self.lines[i][1] != indent:
                break
            if self.content(i, indent).startswith("- "):
                break
        if i < len(self.lines) and self.lines[i][1] is not None and self.lines[i][1] > indent:
            raise YamlError(f"line {self.lines[i][0]}: unexpected indentation")
        return result, i

    def scalar_value(self, text, i, indent):
        j = self.next_content(i + 1)
        if j < len(self.lines) and self.lines[j][1] > indent and not text.startswith(("'", '"')):
            raise YamlError(f"line {self.lines[j][0]}: a plain scalar over several lines")
        if text.startswith(("'", '"')) and not self.closed(text):
            raise YamlError(f"line {self.lines[i][0]}: a quoted scalar over several lines")
        return self.scalar(text, self.lines[i][0]), i + 1

    @staticmethod
    def closed(text):
        try:
            _YamlReader.quoted(text)
            return True
        except YamlError:
            return False

    def block_scalar(self, header, i, indent):
        m = re.fullmatch(r"([|>])([+-]?)", header)
        if not m:
            raise YamlError(f"line {self.lines[i][0]}: block scalar header {header!r}")
        style, chomp = m.groups()
        body, j, block_indent = [], i + 1, None
        while j < len(self.lines):
            number, line_indent, raw = self.lines[j]
            if line_indent is None and raw.strip() == "":
                body.append("")
                j += 1
                continue
            if line_indent is None:
                line_indent = len(raw) - len(raw.lstrip(" "))
            if line_indent <= indent:
                break
            if block_indent is None:
                block_indent = line_indent
            if line_indent < block_indent:
                raise YamlError(f"line {number}: a block scalar line less indented than its first")
            body.append(raw[block_indent:])
            j += 1
        trailing = 0
        while body and body[-1] == "":
            body.pop()
            trailing += 1
        if style == "|":
            text = "\n".join(body)
        else:
            text = ""
            for k, line in enumerate(body):
                if k == 0:
                    text = line
                elif line == "" or body[k - 1] == "":
                    text += "\n" if line == "" else line
                else:
                    text += " " + line
        if chomp == "-":
            pass
        elif chomp == "+":
            text += "\n" * (trailing + 1)
        elif body:
            text += "\n"
        return text, j

    @staticmethod
    def quoted(text):
        if text.startswith("'"):
            if len(text) < 2 or not text.endswith("'"):
                raise YamlError("unclosed single-quoted scalar")
            inner = text[1:-1]
            if re.search(r"(?<!')'(?!')", inner.replace("''", "")):
                raise YamlError("stray quote")
            return inner.replace("''", "'")
        if len(text) < 2 or not text.endswith('"') or text.endswith('\\"') and not text.endswith('\\\\"'):
            raise YamlError("unclosed double-quoted scalar")
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise YamlError(f"double-quoted scalar: {error}") from error

    @staticmethod
    def scalar(text, number):
        if text.startswith(("'", '"')):
            try:
                return _YamlReader.quoted(text)
            except YamlError as error:
                raise YamlError(f"line {number}: {error}") from error
        if text == "{}":
            return {}
        if text == "[]":
            return []
        if text[0] in "{[&*!|>%@`":
            raise YamlError(f"line {number}: unsupported scalar {text!r}")
        if " #" in text:
            raise YamlError(f"line {number}: a comment after a value")
        if text in ("null", "~", "Null", "NULL"):
            return None
        if text in ("true", "True", "TRUE"):
            return True
        if text in ("false", "False", "FALSE"):
            return False
        if re.fullmatch(r"[-+]?\d+", text):
            return int(text)
        if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", text):
            return float(text)
        return text


# ----------------------------------------------------------------------------------------------
# The CRD reference


def number_text(value):
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, int) and abs(value) >= 10000 else str(value)


def cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


def code(value):
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, separators=(", ", ": "), ensure_ascii=False)
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def type_text(node, required):
    if node.get("x-kubernetes-int-or-string"):
        kind = "integer or string"
    else:
        kind = node.get("type", "")
        if kind == "array":
            item = node.get("items", {})
            item_kind = "integer or string" if item.get("x-kubernetes-int-or-string") \
                else item.get("type", "")
            kind = f"array of {item_kind}" if item_kind else "array"
        elif kind == "object" and isinstance(node.get("additionalProperties"), dict) \
                and "properties" not in node:
            value = node["additionalProperties"]
            value_kind = "integer or string" if value.get("x-kubernetes-int-or-string") \
                else value.get("type", "")
            kind = f"map of {value_kind}" if value_kind else "map"
    if node.get("format"):
        kind += f" ({node['format']})"
    marks = []
    if required:
        marks.append("required")
    if node.get("nullable"):
        marks.append("nullable")
    if node.get("x-kubernetes-list-type"):
        marks.append(f"list type {node['x-kubernetes-list-type']}")
    if node.get("x-kubernetes-list-map-keys"):
        marks.append("keys " + ", ".join(f"`{k}`" for k in node["x-kubernetes-list-map-keys"]))
    return ", ".join([kind] + marks) if kind else ", ".join(marks)


def bounds_text(node):
    parts = []

    def span(low, high, unit):
        if low is not None and high is not None:
            return f"{number_text(low)}–{number_text(high)}{unit}"
        if low is not None:
            return f"at least {number_text(low)}{unit}"
        return f"at most {number_text(high)}{unit}"

    for low, high, unit in (("minimum", "maximum", ""), ("minLength", "maxLength", " characters"),
                            ("minItems", "maxItems", " items"),
                            ("minProperties", "maxProperties", " entries")):
        if node.get(low) is not None or node.get(high) is not None:
            parts.append(span(node.get(low), node.get(high), unit))
    if "enum" in node:
        parts.append("one of " + ", ".join(code(v) for v in node["enum"]))
    if "pattern" in node:
        parts.append("pattern " + code(node["pattern"]))
    for key, label in (("items", "each item"), ("additionalProperties", "each value")):
        inner = node.get(key)
        if isinstance(inner, dict) and "properties" not in inner:
            inner_bounds = bounds_text(inner)
            if inner_bounds:
                parts.append(f"{label}: {inner_bounds}")
    return "; ".join(parts)


def walk_schema(node, path, required, rows, rules):
    rows.append((path, node, required))
    for rule in node.get("x-kubernetes-validations", []):
        rules.append((path, rule))
    needed = set(node.get("required", []))
    for key, child in node.get("properties", {}).items():
        walk_schema(child, f"{path}.{key}" if path else key, key in needed, rows, rules)
    items = node.get("items")
    if isinstance(items, dict) and ("properties" in items or "x-kubernetes-validations" in items):
        walk_schema(items, f"{path}[]", False, rows, rules)
    value = node.get("additionalProperties")
    if isinstance(value, dict) and ("properties" in value or "x-kubernetes-validations" in value):
        walk_schema(value, f"{path}.<key>", False, rows, rules)


def wrapped(text):
    return textwrap.fill(text, width=99, break_long_words=False, break_on_hyphens=False)


def crd_reference():
    with open(os.path.join(ROOT, CRD), encoding="utf-8") as f:
        crd = load_yaml(f.read())
    spec = crd["spec"]
    names = spec["names"]
    out = []
    add = out.append
    for version in spec["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        rows, rules = [], []
        walk_schema(schema, "", False, rows, rules)
        add(f"# {names['kind']} reference ({spec['group']}/{version['name']})")
        add("")
        add(wrapped(f"For whoever writes a `{names['kind']}`: every field with its type, default, bounds "
            "and description, and every validation rule with its message."))
        add("")
        add(wrapped(f"Generated from `{CRD}` (itself generated from the operator's types in "
            "`operator/src/crd/`) by `scripts/check-docs.py --write`; `scripts/test.sh` fails "
            "when this file no longer matches the CRD. Edit the types, not this file. What the "
            "fields do, with examples: [kubernetes.md](kubernetes.md)."))
        add("")
        scope = spec.get("scope", "").lower()
        extras = []
        if names.get("shortNames"):
            extras.append("short name " + ", ".join(f"`{n}`" for n in names["shortNames"]))
        if names.get("categories"):
            extras.append("category " + ", ".join(f"`{n}`" for n in names["categories"]))
        add(wrapped(f"`apiVersion: {spec['group']}/{version['name']}`, `kind: {names['kind']}` (plural "
            f"`{names['plural']}`, {', '.join(extras)}), {scope}"
            + (", with a `status` subresource." if "status" in version.get("subresources", {})
               else ".")))
        add("")
        if schema.get("description"):
            add(wrapped(cell(schema["description"])))
            add("")
        columns = version.get("additionalPrinterColumns", [])
        if columns:
            add(f"## What `kubectl get {names.get('shortNames', [names['plural']])[0]}` shows")
            add("")
            add("| column | type | JSON path | description |")
            add("|---|---|---|---|")
            for column in columns:
                add(f"| {cell(column['name'])} | {cell(column.get('type', ''))} | "
                    f"{code(column['jsonPath'])} | {cell(column.get('description', ''))} |")
            add("")
        compound = {path for path, node, _ in rows
                    if path.count(".") == 1 and "[" not in path and (
                        "properties" in node or "properties" in node.get("items", {}))}
        groups = {}
        for path, node, required in rows[1:]:
            second = ".".join(path.split(".")[:2]).split("[")[0]
            top = second if second in compound else path.split(".")[0].split("[")[0]
            groups.setdefault(top, []).append((path, node, required))
        add("## Fields")
        add("")
        add("Paths from the object's root; `[]` is each item of a list, `<key>` each entry of a "
            "map. Bounds are inclusive.")
        add("")
        for top, members in groups.items():
            add(f"### `{top}`")
            add("")
            add("| field | type | default | bounds | description |")
            add("|---|---|---|---|---|")
            for path, node, required in members:
                default = code(node["default"]) if "default" in node else ""
                add(f"| `{path}` | {cell(type_text(node, required))} | {default} | "
                    f"{cell(bounds_text(node))} | {cell(node.get('description', ''))} |")
            add("")
        add("## Validation rules (CEL)")
        add("")
        add(wrapped(f"{len(rules)} rules, each checked by the API server on create and update: "
                    "`at` is the object the rule runs on (`self`), `field` the field its error "
                    "names (relative to `at`), `reason` the error's reason."))
        add("")
        add("| at | rule | message | reason | field |")
        add("|---|---|---|---|---|")
        for path, rule in rules:
            add(f"| `{path or '(root)'}` | {code(rule['rule'])} | {cell(rule.get('message', ''))} | "
                f"{cell(rule.get('reason', ''))} | "
                f"{code(rule['fieldPath']) if rule.get('fieldPath') else ''} |")
        add("")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------


REPO = None


def main(argv):
    global REPO
    write = "--write" in argv[1:]
    unknown = [a for a in argv[1:] if a != "--write"]
    if unknown:
        print("usage: scripts/check-docs.py [--write]", file=sys.stderr)
        return 2
    problems = []
    try:
        reference = crd_reference() + "\n"
    except (YamlError, KeyError, OSError) as error:
        reference = None
        problems.append(f"{CRD}: cannot be read for the reference: {error}")
    target = os.path.join(ROOT, CRD_REFERENCE)
    if reference is not None:
        if write:
            with open(target, "w", encoding="utf-8") as f:
                f.write(reference)
            print(f"check-docs: wrote {CRD_REFERENCE}")
        else:
            try:
                with open(target, encoding="utf-8") as f:
                    current = f.read()
            except OSError:
                current = None
            if current != reference:
                problems.append(f"{CRD_REFERENCE}:1: stale or missing: it does not match {CRD}; "
                                "run scripts/check-docs.py --write")
    REPO = Repository()
    counts = {"links": 0, "paths": 0, "blocks": 0, "commands": 0}
    docs = documents()
    for doc in docs:
        check_document(REPO, doc, problems, counts)
    for problem in problems:
        print(problem)
    print(f"check-docs: {len(docs)} documents, {counts['links']} links, {counts['paths']} paths, "
          f"{counts['commands']} commands in {counts['blocks']} shell blocks: "
          + (f"{len(problems)} problems" if problems else "all good"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
