"""Tests of the training-data pipeline's synthetic conversations and text extraction.

    /usr/bin/python3 -m unittest train/tests/test_data.py

Fast (a few seconds) and independent of the Debian source packages; the test that runs
`dsv4 tokenize` over generated conversations is skipped when the binary is not built.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from fractions import Fraction

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "train", "data"))

import sources  # noqa: E402
import synth_chat  # noqa: E402
from sources import Definition  # noqa: E402

KNOW = synth_chat.Knowledge(
    definitions=[Definition("wordnet", "lighthouse", "a tower with a light that gives warning of "
                            "shoals to passing ships", {"pos": "noun", "senses": [
                                ("a tower with a light that gives warning of shoals to passing "
                                 "ships", ["the lighthouse was visible for miles"])]}),
                 Definition("jargon", "kluge", "A clever programming trick intended to solve a "
                            "particular nasty case in an expedient way.", {"head": "n."}),
                 Definition("python-docs", "textwrap.dedent", "Remove any common leading "
                            "whitespace from every line in text.", {"kind": "function"}),
                 Definition("manpages", "strlen", "calculate the length of a string",
                            {"section": "3"})],
    quotes=[("computers", "The computer is a moron.\n        -- Peter Drucker", "computers/0")],
    verses=[("Genesis 1:1", "In the beginning God created the heaven and the earth.",
             "Genesis 1")],
    passages=["The cat sat on the mat. It was a sunny day. The dog slept nearby. Nobody moved."])

N = 1500  # conversations per check: every kind appears many times


def conversations(seed=1, n=N, split="train"):
    return list(synth_chat.generate(seed, n, KNOW, split))


# -- an independent checker of the arithmetic written in the text ------------------------------

NUM = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
EXPR = rf"{NUM}(?: [-+×÷*/] {NUM})*"
# A chain "E = E = ...": not preceded by a character that would make the first number part of
# something else ("9/5", "$210", "x2", "(10 + 27) × 8": the parenthesised answer is checked
# through its reasoning steps).
CHAIN = re.compile(rf"(?<![\w/.,$%)])(?<!\) )(?<![-+×÷*/] )({EXPR}(?: = {EXPR})+)(?![\d])")


def value(expr):
    """Evaluates "a op b op c" with the usual precedence, exactly."""
    toks = expr.split(" ")
    nums = [Fraction(t.replace(",", "")) for t in toks[0::2]]
    ops = toks[1::2]
    # multiplication and division first
    vals, pending = [nums[0]], []
    for op, n in zip(ops, nums[1:]):
        if op in "×*":
            vals[-1] *= n
        elif op in "÷/":
            vals[-1] /= n
        else:
            pending.append(op)
            vals.append(n)
    out = vals[0]
    for op, n in zip(pending, vals[1:]):
        out = out + n if op == "+" else out - n
    return out


def decimals(expr):
    m = re.search(r"\.(\d+)$", expr)
    return len(m.group(1)) if m else 0


def check_chains(testcase, text, where):
    """Every "E = E = ..." chain in `text` holds (a shown value may be rounded to its printed
    number of decimals)."""
    n = 0
    for m in CHAIN.finditer(text):
        parts = m.group(1).split(" = ")
        exact = value(parts[0])
        for p in parts[1:]:
            got = value(p)
            if got != exact:
                if len(p.split(" ")) == 1 and decimals(p) > 0:
                    tol = Fraction(1, 2 * 10 ** decimals(p))
                    testcase.assertLessEqual(abs(got - exact), tol, f"{m.group(1)!r} in {where}")
                else:
                    testcase.fail(f"{m.group(1)!r} is false in {where}: {text}")
            n += 1
    return n


class SyntheticChats(unittest.TestCase):
    def test_deterministic_per_seed_and_prefix_stable(self):
        a = [json.dumps(c) for _, c in conversations(1, 300)]
        b = [json.dumps(c) for _, c in conversations(1, 300)]
        self.assertEqual(a, b)
        self.assertEqual(a[:100], [json.dumps(c) for _, c in conversations(1, 100)])
        other = [json.dumps(c) for _, c in conversations(2, 300)]
        self.assertLess(sum(x == y for x, y in zip(a, other)), 10)
        val = [json.dumps(c) for _, c in conversations(1, 300, "val")]
        self.assertLess(sum(x == y for x, y in zip(a, val)), 10)

    def test_every_kind_and_both_modes_appear(self):
        convs = conversations()
        kinds = {k for k, _ in convs}
        self.assertEqual(kinds, {k for k, _ in synth_chat.KIND_WEIGHTS})
        self.assertTrue(any(c["thinking"] for _, c in convs))
        self.assertTrue(any(not c["thinking"] for _, c in convs))

    def test_message_structure(self):
        for kind, c in conversations():
            msgs = c["messages"]
            self.assertEqual(set(c) - {"messages", "tools", "thinking"}, set())
            self.assertIsInstance(c["thinking"], bool)
            last = msgs[-1]
            self.assertEqual(last["role"], "assistant", kind)
            self.assertIsInstance(last["content"], str)
            self.assertTrue(last["content"])
            self.assertNotIn("tool_calls", last)
            for i, m in enumerate(msgs):
                self.assertIn(m["role"], ("system", "user", "assistant", "tool"))
                if m["role"] == "system":
                    self.assertEqual(i, 0)
                if m["role"] == "assistant":
                    # thinking mode: every assistant turn reasons; chat mode: none does
                    self.assertEqual("reasoning_content" in m, c["thinking"], (kind, m))
                    if c["thinking"]:
                        self.assertTrue(m["reasoning_content"].strip())
                if m["role"] in ("user", "system"):
                    self.assertIsInstance(m["content"], str)
                    self.assertTrue(m["content"])

    def test_arithmetic_in_reasoning_and_answers_is_correct(self):
        checked = 0
        for kind, c in conversations(n=3000):
            for m in c["messages"]:
                if m["role"] != "assistant":
                    continue
                for field in ("reasoning_content", "content"):
                    if m.get(field):
                        checked += check_chains(self, m[field], f"{kind} {field}")
        self.assertGreater(checked, 1500)

    def test_answers_match_an_independent_computation(self):
        import random
        for i in range(2000):
            rng = random.Random(f"test:{i}")
            fn = synth_chat.ARITH[i % len(synth_chat.ARITH)][0]
            q, r, a, v = fn(rng)
            # Recompute from the question alone where it holds an expression.
            expr = re.search(rf"({NUM}(?: ?[-+×x*÷/] ?{NUM})+)", q.replace("(", "").replace(")", ""))
            if fn in (synth_chat.arith_add, synth_chat.arith_sub, synth_chat.arith_mul,
                      synth_chat.arith_div) and expr and " and " not in q and " by " not in q \
                    and " from " not in q:
                e = re.sub(r" ?([-+×x*÷/]) ?", r" \1 ", expr.group(1)).replace(" x ", " × ")
                self.assertEqual(value(e), Fraction(v), (q, a))
            if fn is synth_chat.arith_percent:
                p, base = re.findall(r"[\d.]+", q.replace(",", ""))[:2]
                self.assertEqual(Fraction(p) * Fraction(base) / 100, Fraction(v), q)
            shown = synth_chat.fmt_num(v, 2)
            self.assertIn(shown, a, (q, a))

    def test_unit_conversions(self):
        import random
        for i in range(500):
            rng = random.Random(f"units:{i}")
            q, r, a, v = synth_chat.units_linear(rng)
            # The answer names both units: "42 kilometres is about 26.1 miles."
            found = [(m.group(1), Fraction(f)) for _, _, f, ns, nd in synth_chat.LINEAR_UNITS
                     for m in [re.fullmatch(rf"([\d.,]+) {ns} is (?:about )?[\d.,]+ {nd}\.", a)]
                     if m]
            self.assertEqual(len(found), 1, a)
            self.assertIn(found[0][0], q)
            self.assertEqual(Fraction(found[0][0].replace(",", "")) * found[0][1], Fraction(v), q)
            self.assertIn(synth_chat.fmt_num(v, 2), a)
            q, r, a, v = synth_chat.units_temperature(rng)
            t = Fraction(re.search(r"-?\d[\d.]*", q).group(0))
            want = t * Fraction(9, 5) + 32 if "Fahrenheit" in q.split(" in ")[-1] or "°F?" in q \
                else (t - 32) * Fraction(5, 9)
            self.assertEqual(want, Fraction(v), q)

    def test_tool_calls_are_valid_json_matching_the_schema(self):
        calls = 0
        for kind, c in conversations():
            tools = {t["function"]["name"]: t["function"] for t in c.get("tools", [])}
            self.assertEqual(len(tools), len(c.get("tools", [])), "duplicate tool names")
            for t in c.get("tools", []):
                self.assertEqual(t["type"], "function")
                self.assertRegex(t["function"]["name"], r"^[A-Za-z0-9_-]{1,64}$")
            open_ids = []
            for m in c["messages"]:
                if m["role"] == "assistant" and m.get("tool_calls"):
                    self.assertIsNone(m["content"])
                    for tc in m["tool_calls"]:
                        self.assertEqual(tc["type"], "function")
                        fn = tools[tc["function"]["name"]]  # only offered tools are called
                        args = json.loads(tc["function"]["arguments"])
                        self.assertIsInstance(args, dict)
                        check_schema(self, args, fn["parameters"], fn["name"])
                        open_ids.append(tc["id"])
                        calls += 1
                elif m["role"] == "tool":
                    self.assertIn(m["tool_call_id"], open_ids)
                    open_ids.remove(m["tool_call_id"])
                    json.loads(m["content"])
                elif m["role"] in ("user", "assistant"):
                    self.assertEqual(open_ids, [], "a tool call without its result")
        self.assertGreater(calls, 500)

    def test_weather_tool_conversations(self):
        """The end-to-end test asks "What is the weather in Paris?" with an OpenAI-style
        get_weather tool: such calls, results and answers must be common."""
        canonical, named = 0, set()
        for kind, c in conversations():
            for i, m in enumerate(c["messages"]):
                for tc in m.get("tool_calls") or []:
                    name = tc["function"]["name"]
                    tool = next(t["function"] for t in c["tools"] if t["function"]["name"] == name)
                    props = tool["parameters"]["properties"]
                    if "weather" in name.lower() and "forecast" not in name.lower():
                        named.add(name)
                        args = json.loads(tc["function"]["arguments"])
                        loc = next(iter(args))
                        self.assertIn(loc, props)
                        city = args[loc].split(",")[0]
                        self.assertIn(city, c["messages"][i - 1]["content"])
                        if name == "get_weather" and loc == "location":
                            canonical += 1
        self.assertGreater(canonical, 50)
        self.assertGreater(len(named), 5)  # varied names: the model must read the tool list
        # The final answer reports what the tool returned.
        for kind, c in conversations(n=300):
            if kind != "weather":
                continue
            results = [json.loads(m["content"]) for m in c["messages"] if m["role"] == "tool"]
            answers = " ".join(m["content"] for m in c["messages"]
                               if m["role"] == "assistant" and m["content"])
            for r in results:
                if "temperature" in r:
                    self.assertIn(f"{r['temperature']} °", answers)
                    self.assertIn(r["condition"], answers)

    def test_thinking_flag_follows_the_generator_and_is_balanced(self):
        convs = conversations()
        share = sum(c["thinking"] for _, c in convs) / len(convs)
        self.assertGreater(share, 0.4)
        self.assertLess(share, 0.6)

    def test_dsv4_tokenize_accepts_every_conversation(self):
        dsv4 = os.path.join(ROOT, "build", "release", "apps", "dsv4", "dsv4")
        tok = os.path.join(ROOT, "node_modules", "@lenml", "tokenizer-deepseek_v3", "models",
                           "tokenizer.json")
        if not (os.access(dsv4, os.X_OK) and os.path.exists(tok)):
            self.skipTest("dsv4 binary or the npm tokenizer not available")
        with tempfile.TemporaryDirectory() as d:
            subprocess.run([dsv4, "make-tiny", "--tokenizer-only", "--vocab-size", "8192",
                            "--out", d + "/tok", "--tokenizer", tok], check=True,
                           capture_output=True)
            with open(d + "/c.jsonl", "w") as f:
                for _, c in conversations(n=600):
                    f.write(json.dumps(c, ensure_ascii=False) + "\n")
            r = subprocess.run([dsv4, "tokenize", "--tokenizer", d + "/tok", "--input",
                                d + "/c.jsonl", "--output", d + "/c.bin"], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("0 texts, 600 chats", r.stdout)


def check_schema(testcase, value, schema, where):
    """A small JSON-schema check: type, enum, properties, required, items."""
    t = schema.get("type")
    if "enum" in schema:
        testcase.assertIn(value, schema["enum"], where)
    if t == "object":
        testcase.assertIsInstance(value, dict, where)
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            testcase.assertIn(k, value, f"{where}: required {k}")
        for k, v in value.items():
            testcase.assertIn(k, props, f"{where}: unknown argument {k}")
            check_schema(testcase, v, props[k], f"{where}.{k}")
    elif t == "array":
        testcase.assertIsInstance(value, list, where)
        for v in value:
            check_schema(testcase, v, schema.get("items", {}), where + "[]")
    elif t == "string":
        testcase.assertIsInstance(value, str, where)
        testcase.assertTrue(value, where)
    elif t == "integer":
        testcase.assertTrue(isinstance(value, int) and not isinstance(value, bool), where)
    elif t == "number":
        testcase.assertTrue(isinstance(value, (int, float)) and not isinstance(value, bool), where)
    elif t == "boolean":
        testcase.assertIsInstance(value, bool, where)


class Extraction(unittest.TestCase):
    def test_missing_or_corrupt_inputs_name_file_and_package(self):
        with self.assertRaisesRegex(sources.SourceError,
                                    r"^/nonexistent/html is missing: install the Debian package "
                                    r"python3-doc \(train/deps\)$"):
            sources.python_docs("/nonexistent/html")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "jargon.txt.gz"), "wb") as f:
                f.write(b"not gzip")
            with self.assertRaisesRegex(sources.SourceError, r"jargon.txt.gz \(package "
                                        r"jargon-text\) cannot be read"):
                sources.jargon(os.path.join(d, "jargon.txt.gz"))

    def test_normalise(self):
        self.assertEqual(sources.normalise("a\r\n\tb  \n\n\n\nc\x07\n"), "a\n    b\n\nc")

    def test_roff_to_text(self):
        src = "\n".join([
            '.\\" Copyright line that must go', ".TH strlen 3 2023-02-05",
            ".SH NAME", "strlen \\- calculate the length of a string", ".SH SYNOPSIS", ".nf",
            ".B #include <string.h>", ".BI \"size_t strlen(const char *\" s );", ".fi",
            ".SH DESCRIPTION", "The", ".BR strlen ()", "function calculates the length of",
            ".IR s ,", "excluding the null byte (\\[aq]\\e0\\[aq]).", ".PP", "Second \\fBpara\\fP."])
        title, text, name = sources.roff_to_text(src)
        self.assertEqual(title, "strlen")
        self.assertEqual(name, "strlen - calculate the length of a string")
        self.assertNotIn("Copyright", text)
        self.assertIn("#include <string.h>\nsize_t strlen(const char *s);", text)
        self.assertIn("The strlen() function calculates the length of s, excluding the null "
                      "byte ('\\0').", text)
        self.assertIn("\n\nSecond para.", text)

    def test_html_text_drops_navigation_and_keeps_code(self):
        page = ("<html><body><div class='related'>Navigation</div><div role='main'>"
                "<h1>Title<a class='headerlink'>¶</a></h1><p>Some   <b>text</b>\nhere.</p>"
                "<div class='toctree-wrapper'><ul><li>TOC entry</li></ul></div>"
                "<ul><li><p>item one</p></li></ul>"
                "<pre>x = 1\n    y = 2</pre>"
                "<dl class='py function'><dt id='m.f'>m.f(x)</dt><dd><p>Do a thing. More.</p></dd></dl>"
                "</div><div class='footer'>Copyright</div></body></html>")
        p = sources._HtmlText()
        p.feed(page)
        text = p.text()
        self.assertEqual(text, "Title\n\nSome text here.\n\n- item one\n\nx = 1\n    y = 2\n\n"
                               "m.f(x)\n\nDo a thing. More.")
        self.assertEqual(p.defs, [("m.f", "function", "Do a thing. More.")])


if __name__ == "__main__":
    unittest.main()
