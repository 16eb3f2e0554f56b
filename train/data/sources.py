"""Prose sources for dsv4-mini: plain-text documents extracted from Debian packages.

Installs nothing: `train/deps` installs the packages listed in PACKAGES.  Every source here
is public domain or under a permissive licence (checked against
/usr/share/doc/<package>/copyright; docs/training-data.md names each one and why copyleft
texts are left out).  Each extractor strips the markup (HTML, roff, the Jargon File's
layout), normalises whitespace, drops licence headers, indexes and tables of contents, and
returns `Document`s.  Some sources also yield `Definition`s (a term and what it means), which
synth_chat.py turns into short factual conversations.

Missing or corrupt inputs raise SourceError with one line naming the file and the package.
"""
import glob
import gzip
import html
import html.parser
import os
import re
import subprocess
from dataclasses import dataclass, field

# Debian package -> what we take from it.  The KJV text needs the `bible` program of
# bible-kjv to decode its compressed data file.
PACKAGES = {
    "bible-kjv-text": "King James Version of the Bible (data)",
    "bible-kjv": "the `bible` program that prints the KJV text",
    "python3-doc": "Python 3 documentation (HTML)",
    "jargon-text": "the Jargon File 4.4.7 (plain text)",
    "fortunes": "fortune cookie quotations",
    "fortunes-min": "fortune cookie quotations (the base `fortunes` file)",
    "wordnet-base": "WordNet 3.0 glosses (definitions)",
    "manpages": "Linux man pages (only the BSD/MIT-licensed ones)",
    "manpages-dev": "Linux man pages, sections 2 and 3 (only the BSD/MIT-licensed ones)",
    "sqlite3-doc": "the SQLite documentation (HTML)",
    "postgresql-doc-15": "the PostgreSQL 15 manual (HTML)",
}


class SourceError(Exception):
    """A missing or unreadable input: the message is one line naming it."""


@dataclass
class Document:
    source: str  # "kjv", "python-docs", ...
    key: str     # unique within the source (book/chapter, page path, ...)
    group: str   # held-out selection unit (a KJV book, a Python doc section, ...)
    text: str


@dataclass
class Definition:
    source: str     # "wordnet", "python-docs", "manpages", "jargon"
    term: str       # what the user asks about
    meaning: str    # one or a few sentences
    extra: dict = field(default_factory=dict)  # source-specific details (part of speech, ...)


def _need(path, package):
    if not os.path.exists(path):
        raise SourceError(f"{path} is missing: install the Debian package {package} (train/deps)")
    return path


def _read_text(path, package, encoding="utf-8"):
    _need(path, package)
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding=encoding, errors="strict") as f:
            return f.read()
    except (OSError, UnicodeDecodeError, EOFError) as e:
        raise SourceError(f"{path} (package {package}) cannot be read: {e}") from None


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def normalise(text):
    """Plain text with tidy whitespace: LF line ends, no tabs or control characters, no trailing
    spaces, at most one blank line in a row, no leading/trailing blank lines."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00a0", " ")
    text = text.replace("\t", "    ")
    text = _CONTROL.sub("", text)
    lines = [ln.rstrip() for ln in text.split("\n")]
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def _unwrap(lines):
    """Joins hard-wrapped lines of a paragraph into one line."""
    return " ".join(ln.strip() for ln in lines if ln.strip())


# --------------------------------------------------------------------------------------------
# King James Version (public domain)

KJV_BOOKS = [
    "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth",
    "1 Samuel", "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra",
    "Nehemiah", "Esther", "Job", "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon",
    "Isaiah", "Jeremiah", "Lamentations", "Ezekiel", "Daniel", "Hosea", "Joel", "Amos",
    "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai", "Zechariah",
    "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
    "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
    "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James",
    "1 Peter", "2 Peter", "1 John", "2 John", "3 John", "Jude", "Revelation",
]

_VERSE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def kjv(bible_cmd="bible"):
    """One document per chapter ("Genesis 1" then one verse per line); group = the book."""
    _need("/usr/lib/bible.data", "bible-kjv-text")
    try:
        out = subprocess.run([bible_cmd, "-f", "Gen1:1-Rev22:21"], capture_output=True,
                             check=True, timeout=120).stdout.decode("utf-8")
    except FileNotFoundError:
        raise SourceError("the `bible` program is missing: install the Debian package "
                          "bible-kjv (train/deps)") from None
    except (subprocess.SubprocessError, UnicodeDecodeError) as e:
        raise SourceError(f"`bible` failed to print the KJV text: {e}") from None
    chapters = {}  # (book index, chapter) -> verses
    abbrevs = []
    for line in out.splitlines():
        m = _VERSE.match(line)
        if not m:
            continue
        abbr, chap, _verse, text = m.groups()
        if not abbrevs or abbrevs[-1] != abbr:
            if abbr in abbrevs:
                raise SourceError(f"`bible` output is out of order at {line[:40]!r}")
            abbrevs.append(abbr)
        chapters.setdefault((len(abbrevs) - 1, int(chap)), []).append(text.strip())
    if len(abbrevs) != len(KJV_BOOKS) or sum(len(v) for v in chapters.values()) < 31000:
        raise SourceError(f"`bible` printed {len(abbrevs)} books and "
                          f"{sum(len(v) for v in chapters.values())} verses; expected 66 and "
                          "31102 (package bible-kjv-text damaged?)")
    docs, verses = [], []
    for (book, chap), vs in sorted(chapters.items()):
        name = KJV_BOOKS[book]
        docs.append(Document("kjv", f"{name} {chap}", name,
                             normalise(f"{name} {chap}\n\n" + "\n".join(vs))))
        for i, v in enumerate(vs, 1):
            verses.append((f"{name} {chap}:{i}", v, f"{name} {chap}"))
    return docs, verses


# --------------------------------------------------------------------------------------------
# Python documentation (PSF License Version 2; code examples also 0BSD)

PY_DOC_DIR = "/usr/share/doc/python3.11/html"
# Indexes, search, licence/copyright/about boilerplate and the full table of contents.
PY_SKIP = re.compile(r"^(genindex.*|py-modindex|search|contents|copyright|license|bugs|about|"
                     r"download|whatsnew/changelog)\.html$")

_BLOCK = {"p", "div", "section", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "pre",
          "tr", "br", "table", "ul", "ol", "dl", "blockquote", "figure", "caption", "hr"}
_SKIP_TAGS = {"script", "style", "head", "title"}
# Classes whose whole subtree is navigation or a table of contents.
_SKIP_CLASSES = {"headerlink", "toctree-wrapper", "contents", "related", "sphinxsidebar",
                 "linenos", "footer", "navigation", "mobile-nav"}


class _HtmlText(html.parser.HTMLParser):
    """Text of the main content of a Sphinx page, with paragraph structure; also collects the
    first sentence of each documented Python object (<dl class="py ..."><dt id=...><dd><p>)."""

    def __init__(self, main="role-main", skip_classes=(), skip_tags=(), drop_block=None):
        super().__init__(convert_charrefs=True)
        self.drop_block = drop_block  # regex: whole paragraphs to leave out
        self.main = main      # "role-main": Sphinx's <div role="main">; "body": all of <body>
        self.skip_classes = _SKIP_CLASSES | set(skip_classes)
        self.skip_tags = _SKIP_TAGS | set(skip_tags)
        self.parts = []
        self.in_main = 0      # depth inside the main content, 0 = outside
        self.skip = 0         # depth inside a skipped subtree
        self.pre = 0
        self.stack = []       # (tag, skip-started-here, main-started-here)
        self.defs = []        # (object id, kind, first paragraph)
        self.pending = None   # [id, kind, depth of dl, collecting?, text parts]
        self.dl_kinds = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag in ("br", "hr", "img", "meta", "link", "input", "wbr"):
            if tag in ("br", "hr") and self.in_main and not self.skip:
                self.parts.append("\n")
            return
        starts_main = (tag == "div" and a.get("role") == "main") if self.main == "role-main" \
            else tag == "body"
        starts_skip = tag in self.skip_tags or bool(classes & self.skip_classes) or tag == "nav"
        self.stack.append((tag, starts_skip, starts_main))
        if starts_main:
            self.in_main += 1
        if starts_skip:
            self.skip += 1
        if not self.in_main or self.skip:
            return
        if tag == "dl":
            kinds = classes & {"function", "method", "class", "exception", "attribute", "data",
                               "classmethod", "staticmethod", "decorator"}
            self.dl_kinds.append(next(iter(kinds)) if "py" in classes and kinds else None)
        if tag == "dt" and self.dl_kinds and self.dl_kinds[-1] and a.get("id") and \
                self.pending is None:
            self.pending = [a["id"], self.dl_kinds[-1], len(self.dl_kinds), False, []]
        if tag == "p" and self.pending is not None and not self.pending[3] and \
                len(self.dl_kinds) == self.pending[2]:
            self.pending[3] = True
        if tag == "pre":
            self.pre += 1
        if tag == "p" and self.parts and self.parts[-1] == "- ":
            pass  # a list item's first paragraph stays on the item's line
        elif tag in _BLOCK:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
                                                "dt", "table", "section") else "\n")
            if tag == "li":
                self.parts.append("- ")
            if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
                self.parts.append("\x01")  # heading marker, removed later
        elif tag in ("td", "th"):
            self.parts.append(" | ")

    def handle_endtag(self, tag):
        # Pop to the matching tag (HTML pages may leave <p>/<li> unclosed).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                break
        else:
            return
        while len(self.stack) > i:
            t, was_skip, was_main = self.stack.pop()
            if not self.skip and self.in_main:
                if t == "pre":
                    self.pre = max(0, self.pre - 1)
                if t == "p" and self.pending is not None and self.pending[3]:
                    text = " ".join("".join(self.pending[4]).split())
                    if text:
                        self.defs.append((self.pending[0], self.pending[1], text))
                    self.pending = None
                if t == "dl" and self.dl_kinds:
                    if self.pending is not None and self.pending[2] == len(self.dl_kinds):
                        self.pending = None
                    self.dl_kinds.pop()
                if t in _BLOCK:
                    self.parts.append("\n")
            if was_skip:
                self.skip -= 1
            if was_main:
                self.in_main -= 1

    def handle_data(self, data):
        if not self.in_main or self.skip:
            return
        if self.pending is not None and self.pending[3]:
            self.pending[4].append(data)
        if self.pre:
            self.parts.append(data.replace("\n", "\x02"))  # protected newline
        else:
            self.parts.append(re.sub(r"\s+", " ", data))

    def text(self):
        raw = "".join(self.parts)
        out = []
        for block in re.split(r"\n\s*\n", raw):
            lines = [ln.strip() for ln in block.split("\n")]
            block = "\n".join(ln for ln in lines if ln)
            block = block.replace("\x01", "")
            if "\x02" in block:  # code: keep its lines and indentation
                block = "\n".join(ln.rstrip() for ln in block.split("\x02")).strip("\n")
            if block.strip() and not (self.drop_block and self.drop_block.match(block)):
                out.append(block)
        return normalise("\n\n".join(out))


def python_docs(doc_dir=PY_DOC_DIR):
    """One document per page (group = the top-level section: library, tutorial, ...), plus the
    first sentence of each documented function/class as a Definition."""
    _need(doc_dir, "python3-doc")
    pages = sorted(glob.glob(os.path.join(doc_dir, "**", "*.html"), recursive=True))
    docs, defs = [], []
    for path in pages:
        rel = os.path.relpath(path, doc_dir)
        if rel.startswith("_") or PY_SKIP.match(rel):
            continue
        parser = _HtmlText()
        try:
            parser.feed(_read_text(path, "python3-doc"))
            parser.close()
        except SourceError:
            raise
        except Exception as e:  # html.parser raises few, but a corrupt page must name itself
            raise SourceError(f"{path} (package python3-doc) cannot be parsed: {e}") from None
        text = parser.text()
        if len(text) < 200:
            continue
        group = rel.split("/")[0] if "/" in rel else "top"
        docs.append(Document("python-docs", rel, group, text))
        for obj, kind, para in parser.defs:
            sentence = first_sentences(para, 1)
            if 20 <= len(sentence) <= 300 and not sentence.endswith(":"):
                defs.append(Definition("python-docs", obj, sentence, {"kind": kind, "doc": rel}))
    if len(docs) < 100:
        raise SourceError(f"{doc_dir}: only {len(docs)} pages found (package python3-doc?)")
    return docs, defs


def _html_pages(name, package, doc_dir, skip, min_pages, parser_args, group_of):
    """Documents of an HTML manual: one per page (pages matching `skip` left out)."""
    _need(doc_dir, package)
    docs = []
    for path in sorted(glob.glob(os.path.join(doc_dir, "**", "*.html"), recursive=True)):
        rel = os.path.relpath(path, doc_dir)
        if skip.match(rel):
            continue
        parser = _HtmlText(**parser_args)
        try:
            parser.feed(_read_text(path, package))
            parser.close()
        except SourceError:
            raise
        except Exception as e:
            raise SourceError(f"{path} (package {package}) cannot be parsed: {e}") from None
        text = parser.text()
        if len(text) >= 300:
            docs.append(Document(name, rel, group_of(rel), text))
    if len(docs) < min_pages:
        raise SourceError(f"{doc_dir}: only {len(docs)} pages found (package {package}?)")
    return docs


SQLITE_DOC_DIR = "/usr/share/doc/sqlite3"
# Release notes and change logs (lists of version numbers), the licence and site pages, the
# keyword and function indexes.
SQLITE_SKIP = re.compile(r"^(releaselog/.*|changes|chronology|copyright|index|docs|sitemap|"
                         r"keyword_index|toc|doclist|support|prosupport|download|news|"
                         r"capi3ref|c3ref/(funclist|constlist|objlist)|.*_toc)\.html$")


def sqlite_docs(doc_dir=SQLITE_DOC_DIR):
    """The SQLite documentation (public domain): one document per page."""
    return _html_pages("sqlite-docs", "sqlite3-doc", doc_dir, SQLITE_SKIP, 100,
                       {"main": "body", "skip_classes": {"nosearch", "fancy-toc1",
                                                         "fancy-toc2", "fancy_toc", "menu",
                                                         "searchmenu", "tagline"},
                        "skip_tags": {"svg", "form", "select", "map", "button"},
                        # the captions of the folded syntax diagrams ("select-stmt:")
                        "drop_block": re.compile(r"^[\w-]+:$")},
                       lambda rel: rel.split("/")[0] if "/" in rel else rel.split("_")[0])


PG_DOC_DIR = "/usr/share/doc/postgresql-doc-15/html"
# Release notes, the bibliography, the index, and the pure tables of contents.
PG_SKIP = re.compile(r"^(release.*|biblio|bookindex|index|legalnotice|appendixes|"
                     r"reference|sql-commands|app-.*-toc|.*-toc)\.html$")


def postgresql_docs(doc_dir=PG_DOC_DIR):
    """The PostgreSQL 15 manual (PostgreSQL licence): one document per page; group = the page
    name's first word (tutorial, sql, datatype, ...)."""
    return _html_pages("postgresql-docs", "postgresql-doc-15", doc_dir, PG_SKIP, 500,
                       {"main": "body", "skip_classes": {"navheader", "navfooter", "toc",
                                                         "indexterm"}},
                       lambda rel: re.split(r"[-.]", rel)[0])


def first_sentences(text, n):
    """The first n sentences of a paragraph (a sentence ends at . ! ? followed by a space and a
    capital letter or the end)."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", text.strip())
    return " ".join(parts[:n]).strip()


# --------------------------------------------------------------------------------------------
# The Jargon File (public domain)

JARGON_PATH = "/usr/share/doc/jargon-text/jargon.txt.gz"
_JARGON_ENTRY = re.compile(r"^   :([^:]+):\s*(.*)$")


def jargon(path=JARGON_PATH):
    """Each lexicon entry unwrapped into paragraphs; documents of about 4 KB of consecutive
    entries (group = the first letter).  {cross-references} lose their braces."""
    text = _read_text(path, "jargon-text")
    lines = text.split("\n")
    entries = []  # (term, header rest, paragraphs)
    cur = None
    para = []
    for ln in lines:
        m = _JARGON_ENTRY.match(ln)
        if m:
            if cur:
                if para:
                    cur[2].append(_unwrap(para))
                entries.append(cur)
            cur, para = (m.group(1).strip(), m.group(2).strip(), []), []
            continue
        if cur is None:
            continue
        if not ln.strip():
            if para:
                cur[2].append(_unwrap(para))
                para = []
            continue
        if not ln.startswith("   ") or ln.startswith("   ═"):
            # Unindented text after the lexicon: the appendices start; stop there.
            if cur and ln.strip().startswith("Appendix"):
                break
            continue
        para.append(ln)
    if cur:
        if para:
            cur[2].append(_unwrap(para))
        entries.append(cur)
    if len(entries) < 2000:
        raise SourceError(f"{path}: only {len(entries)} lexicon entries found (jargon-text?)")

    def clean(s):
        return re.sub(r"\{([^{}]*)\}", r"\1", s)

    docs, defs, chunk, size, pending = [], [], [], 0, []
    for term, head, paras in entries:
        paras = [clean(p) for p in paras if p]
        if not paras:
            continue
        body = f"{term}: {head}".rstrip() + "\n\n" + "\n\n".join(paras)
        chunk.append(body)
        size += len(body)
        meaning = first_sentences(re.sub(r"^\d+\.\s*(\w+\.\s+)?", "", paras[0]), 2)
        if 20 <= len(meaning) <= 400 and not meaning.startswith("[") and \
                re.fullmatch(r"[A-Za-z][\w .'/-]{0,40}", term):
            pending.append(Definition("jargon", term, meaning, {"head": head}))
        if size > 4000:
            key = chunk[0].split(":")[0]
            docs.append(Document("jargon", key, _letter(chunk[0]), normalise("\n\n".join(chunk))))
            for d in pending:
                d.extra["doc"] = key
            defs += pending
            chunk, size, pending = [], 0, []
    if chunk:
        key = chunk[0].split(":")[0]
        docs.append(Document("jargon", key, _letter(chunk[0]), normalise("\n\n".join(chunk))))
        for d in pending:
            d.extra["doc"] = key
        defs += pending
    return docs, defs


def _letter(s):
    c = s[:1].upper()
    return c if c.isalpha() else "#"


# --------------------------------------------------------------------------------------------
# Fortunes (BSD licence)

FORTUNE_DIR = "/usr/share/games/fortunes"
# Left out: ASCII art (not prose), song lyrics and quotes from novels, TV and comics
# (copyrighted works quoted at length), and files prone to offensive jokes.
FORTUNE_SKIP = {"ascii-art", "songs-poems", "pratchett", "startrek", "zippy", "ethnic",
                "men-women", "drugs", "translate-me"}


def fortunes(fortune_dir=FORTUNE_DIR):
    """The fortunes of each file grouped into documents of about 2 KB, one blank line between
    fortunes (group = the file); every fortune is also returned on its own for chats."""
    _need(fortune_dir, "fortunes")
    docs, quotes = [], []
    files = sorted(p for p in glob.glob(os.path.join(fortune_dir, "*"))
                   if os.path.isfile(p) and not p.endswith((".dat", ".u8"))
                   and not os.path.islink(p))
    for path in files:
        name = os.path.basename(path)
        if name in FORTUNE_SKIP:
            continue
        try:
            raw = _read_text(path, "fortunes")
        except SourceError:  # a few fortune files are Latin-1
            raw = _read_text(path, "fortunes", encoding="latin-1")
        items = [normalise(x) for x in re.split(r"\n%\n", raw)]
        items = [x for x in items if x and len(x) < 1200]
        chunk, size, first = [], 0, 0
        for i, item in enumerate(items):
            chunk.append(item)
            size += len(item)
            if size > 2000 or i == len(items) - 1:
                key = f"{name}/{first}"
                docs.append(Document("fortunes", key, name, "\n\n".join(chunk)))
                quotes += [(name, x, key) for x in chunk]
                chunk, size, first = [], 0, i + 1
    if len(quotes) < 1000:
        raise SourceError(f"{fortune_dir}: only {len(quotes)} fortunes found (package fortunes?)")
    return docs, quotes


# --------------------------------------------------------------------------------------------
# WordNet 3.0 (WordNet licence: use, copy, modify and distribute with the notice)

WORDNET_DIR = "/usr/share/wordnet"
_POS = {"noun": "noun", "verb": "verb", "adj": "adjective", "adv": "adverb"}


def wordnet(wordnet_dir=WORDNET_DIR):
    """Glosses as Definitions (one per word: its first senses) and as dictionary-style
    documents ("word (noun): gloss; "example"") of about 3 KB (group = part of speech)."""
    senses = {}  # (word, pos) -> [gloss, ...] in file order (most frequent sense first)
    for pos in ("noun", "verb", "adj", "adv"):
        path = os.path.join(wordnet_dir, f"data.{pos}")
        text = _read_text(path, "wordnet-base", encoding="latin-1")
        for ln in text.split("\n"):
            if not ln or ln.startswith("  ") or "|" not in ln:
                continue  # licence header lines start with two spaces
            head, gloss = ln.split("|", 1)
            f = head.split()
            try:
                n = int(f[3], 16)
            except (IndexError, ValueError):
                raise SourceError(f"{path}: malformed line {ln[:60]!r}") from None
            words = [f[4 + 2 * i] for i in range(n)]
            gloss = gloss.strip()
            for w in words[:3]:
                w = re.sub(r"\(.*\)$", "", w).replace("_", " ")
                senses.setdefault((w, _POS[pos]), []).append(gloss)
    if len(senses) < 50000:
        raise SourceError(f"{wordnet_dir}: only {len(senses)} words found (wordnet-base?)")
    # Only words seen in WordNet's sense-tagged corpus (cntlist.rev): the common ones.  All
    # 147k lemmas would be 11 MB of mostly obscure dictionary lines.
    common = set()
    for ln in _read_text(os.path.join(wordnet_dir, "cntlist.rev"), "wordnet-base",
                         encoding="latin-1").split("\n"):
        f = ln.split()
        if len(f) == 3 and f[2].isdigit() and int(f[2]) >= 1:
            common.add(f[0].split("%")[0].replace("_", " "))
    defs, lines = [], []
    for (w, pos), glosses in sorted(senses.items()):
        if w not in common or not re.fullmatch(r"[a-z][a-z' -]{1,30}", w):
            continue  # rare words, proper nouns, abbreviations, odd spellings
        parsed = [_split_gloss(g) for g in glosses[:3]]
        parsed = [(m, ex) for m, ex in parsed if m]
        if not parsed:
            continue
        defs.append(Definition("wordnet", w, parsed[0][0], {"pos": pos, "senses": parsed}))
        lines.append(f"{w} ({pos}): " + "; ".join(
            m + (f' ("{ex[0]}")' if ex else "") for m, ex in parsed[:2]))
    docs, chunk, size, start = [], [], 0, 0
    for i, ln in enumerate(lines):
        chunk.append(ln)
        size += len(ln)
        if size > 3000 or i == len(lines) - 1:
            key = chunk[0].split(" (")[0] + f"#{start}"
            docs.append(Document("wordnet", key, chunk[0][:1].upper(), "\n".join(chunk)))
            for d in defs[start:i + 1]:
                d.extra["doc"] = key
            chunk, size, start = [], 0, i + 1
    return docs, defs


def _split_gloss(gloss):
    """'a tower with a light...; "the lighthouse was..."' -> (meaning, [examples])."""
    examples = re.findall(r'"([^"]+)"', gloss)
    meaning = re.sub(r';?\s*"[^"]*"', "", gloss).strip(" ;")
    return meaning, examples


# --------------------------------------------------------------------------------------------
# Linux man pages: only the pages the copyright file lists under BSD or MIT (Expat) terms

MAN_DIR = "/usr/share/man"
_PERMISSIVE = {"BSD-2-clause", "BSD-3-clause", "BSD-4-clause", "Expat"}
_SPDX_OK = re.compile(r"^(BSD-\S+|MIT|Expat)$", re.I)


def _dep5_files(path, package):
    """{file glob: licence} of a machine-readable debian/copyright."""
    text = _read_text(path, package)
    out = {}
    for para in text.split("\n\n"):
        files, lic, cur = [], None, None
        for ln in para.split("\n"):
            m = re.match(r"^([A-Za-z-]+):\s*(.*)$", ln)
            if m:
                cur = m.group(1)
                if cur == "Files":
                    files = m.group(2).split()
                elif cur == "License":
                    lic = m.group(2).strip()
            elif cur == "Files" and ln[:1] in (" ", "\t"):
                files += ln.split()
        for f in files:
            if lic:
                out[f] = lic
    return out


def manpages(man_dir=MAN_DIR):
    """Permissively licensed pages of manpages/manpages-dev rendered from roff to text; the NAME
    line of each page is also a Definition."""
    licences = _dep5_files("/usr/share/doc/manpages/copyright", "manpages")
    licences.update(_dep5_files("/usr/share/doc/manpages-dev/copyright", "manpages-dev"))
    docs, defs, seen = [], [], set()
    for rel, lic in sorted(licences.items()):
        if lic not in _PERMISSIVE or "*" in rel or not rel.startswith("man"):
            continue
        path = os.path.join(man_dir, rel + ".gz")
        if not os.path.exists(path):
            continue
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        src = _read_text(real, "manpages")
        spdx = re.search(r"SPDX-License-Identifier:\s*(\S+)", src)
        if spdx and not _SPDX_OK.match(spdx.group(1)):
            continue  # the page itself says otherwise: leave it out
        if re.match(r"^\.so ", src.strip()):
            continue
        title, text, name_line = roff_to_text(src)
        if len(text) < 300:
            continue
        docs.append(Document("manpages", os.path.basename(real)[:-3], rel.split("/")[0], text))
        if name_line and " - " in name_line:
            names, what = name_line.split(" - ", 1)
            section = rel.split("/")[0][3:]
            for n in [x.strip() for x in names.split(",")][:1]:
                defs.append(Definition("manpages", n, what.strip(),
                                       {"section": section, "doc": docs[-1].key}))
    if len(docs) < 20:
        raise SourceError(f"{man_dir}: only {len(docs)} permissive man pages found "
                          "(packages manpages, manpages-dev?)")
    return docs, defs


_ROFF_ESCAPES = [
    (r"\(em", "—"), (r"\[em]", "—"), (r"\(en", "–"), (r"\[en]", "–"), (r"\(aq", "'"),
    (r"\[aq]", "'"), (r"\(dq", '"'), (r"\[dq]", '"'), (r"\(lq", "“"), (r"\[lq]", "“"),
    (r"\(rq", "”"), (r"\[rq]", "”"), (r"\(bu", "•"), (r"\[bu]", "•"), (r"\(co", "©"),
    (r"\[co]", "©"), (r"\(mu", "×"), (r"\[mu]", "×"), (r"\(ti", "~"), (r"\[ti]", "~"),
    (r"\(ha", "^"), (r"\[ha]", "^"), (r"\(rs", "\\"), (r"\[rs]", "\\"), (r"\(<=", "<="),
    (r"\[<=]", "<="), (r"\(>=", ">="), (r"\[>=]", ">="), (r"\(->", "->"), (r"\[->]", "->"),
    (r"\(+-", "±"), (r"\[+-]", "±"), (r"\*(lq", "“"), (r"\*(rq", "”"), (r"\-", "-"),
    (r"\~", " "), (r"\ ", " "), (r"\0", " "), (r"\&", ""), (r"\:", ""), (r"\/", ""),
    (r"\,", ""), (r"\|", ""), (r"\^", ""), (r"\e", "\x03"), (r"\c", ""),
]


def _roff_inline(s):
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)  # font changes
    s = re.sub(r"\\s[+-]?\d", "", s)                # size changes
    s = re.sub(r'\\\*\[[^\]]*\]|\\\*\(..|\\\*.', "", s)  # unknown strings
    for a, b in _ROFF_ESCAPES:
        s = s.replace(a, b)
    s = re.sub(r"\\\[[^\]]*\]", "", s)  # other named glyphs
    s = re.sub(r"\\(.)", r"\1", s)
    return s.replace("\x03", "\\")  # \e: a literal backslash, kept out of the unescaping


def _macro_args(rest):
    """Splits roff macro arguments (double quotes group words)."""
    args, cur, quoted, i = [], "", False, 0
    while i < len(rest):
        c = rest[i]
        if c == '"':
            if quoted and i + 1 < len(rest) and rest[i + 1] == '"':
                cur += '"'
                i += 2
                continue
            quoted = not quoted
        elif c == " " and not quoted:
            if cur:
                args.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    if cur:
        args.append(cur)
    return args


def roff_to_text(src):
    """man(7) source -> (title, plain text, NAME line).  Headings become their own paragraphs,
    filled text is unwrapped, .nf/.fi blocks (synopses, code) keep their lines, tables (.TS)
    become one row per line, comments and layout requests vanish."""
    title, out, para, name_line = "", [], [], ""
    nofill, in_table, section = False, False, ""

    def flush():
        nonlocal para
        if para:
            out.append(("\n" if nofill else " ").join(para) if not nofill else "\n".join(para))
            para = []

    for raw in src.split("\n"):
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if in_table:
            if raw.startswith(".TE"):
                in_table = False
                flush()
                continue
            if raw.endswith(".") and not raw.startswith(".") and "\t" not in raw and \
                    not para:
                continue  # the table's format line
            if raw.startswith(("T{", "T}")) or raw.startswith(".") and not raw.startswith(".B"):
                continue
            cell = _roff_inline(raw.replace("T{", "").replace("T}", "")).replace("\t", " | ")
            if cell.strip() and not re.fullmatch(r"[a-z| ]+;?", cell.strip()):
                para.append(cell.strip())
            continue
        if raw.startswith((".", "'")):
            parts = raw[1:].strip().split(None, 1)
            if not parts:
                continue
            req, rest = parts[0], parts[1] if len(parts) > 1 else ""
            args = _macro_args(rest)
            if req == "TH":
                title = args[0] if args else ""
            elif req in ("SH", "SS"):
                flush()
                section = _roff_inline(" ".join(args)).strip()
                out.append(section.title() if req == "SH" else section)
            elif req in ("PP", "P", "LP", "sp", "br", "in", "RS", "RE"):
                flush()
            elif req in ("TP", "IP", "HP"):
                flush()
                if req == "IP" and args:
                    para.append(_roff_inline(args[0]))
            elif req == "nf" or req == "EX":
                flush()
                nofill = True
            elif req == "fi" or req == "EE":
                flush()
                nofill = False
            elif req == "TS":
                flush()
                in_table = True
            elif req in ("B", "I", "SM", "SB"):
                para.append(_roff_inline(" ".join(args)))
            elif req in ("BR", "RB", "IR", "RI", "BI", "IB"):
                para.append(_roff_inline("".join(args)))
            elif req == "UR" or req == "MT":
                para.append(_roff_inline(args[0]) if args else "")
            # Everything else (ad, nh, hy, ds, de, ...) is layout: dropped.
            continue
        line = _roff_inline(raw)
        if section.upper() == "NAME" and line.strip():
            name_line = (name_line + " " + line.strip()).strip()
        if line.strip() or nofill:
            para.append(line if nofill else line.strip())
    flush()
    blocks = [b.strip("\n") for b in out if b.strip()]
    text = normalise(f"{title}\n\n" + "\n\n".join(blocks))
    return title, text, re.sub(r"\s+", " ", name_line)


# --------------------------------------------------------------------------------------------

def all_sources():
    """Every source: {name: (documents, definitions or other extras)} in a fixed order."""
    kjv_docs, verses = kjv()
    out = {"kjv": (kjv_docs, {"verses": verses})}
    docs, defs = python_docs()
    out["python-docs"] = (docs, {"definitions": defs})
    docs, defs = jargon()
    out["jargon"] = (docs, {"definitions": defs})
    docs, quotes = fortunes()
    out["fortunes"] = (docs, {"quotes": quotes})
    docs, defs = wordnet()
    out["wordnet"] = (docs, {"definitions": defs})
    docs, defs = manpages()
    out["manpages"] = (docs, {"definitions": defs})
    out["sqlite-docs"] = (sqlite_docs(), {})
    out["postgresql-docs"] = (postgresql_docs(), {})
    return out
