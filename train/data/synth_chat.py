#!/usr/bin/env python3
"""Synthetic conversations for dsv4-mini, in the OpenAI chat format the server accepts.

One JSON object per line: {"messages": [...], "tools": [...]?, "thinking": bool}.  Messages
use the roles system/user/assistant/tool; assistant turns may carry `reasoning_content`
(thinking mode) and `tool_calls` ({id, type: "function", function: {name, arguments}} with
`arguments` a JSON string); tool results carry `tool_call_id`.  `dsv4 tokenize` renders each
line with the V4 chat encoder, final assistant turn and EOS included (docs/training-data.md).

Kinds (weights in KIND_WEIGHTS): arithmetic and unit conversions whose reasoning computes the
answer step by step (every number is computed here, exactly); word problems; tool use with
DSML tool calls (weather always among them; varied tool names, descriptions, parameter names
and argument types; several calls per turn; tool results; final answers built from the
results); tools offered but not needed; definitions and quotations drawn from the prose
sources; text continuation; small talk; multi-turn mixes.

Deterministic: conversation i of split s depends only on (seed, s, i) and the knowledge
passed in, so `generate(seed, n)` is a prefix of `generate(seed, n + k)`.

    /usr/bin/python3 train/data/synth_chat.py --seed 1 --count 100 > chats.jsonl
"""
import argparse
import json
import random
import re
import sys
from decimal import Decimal, ROUND_HALF_UP
from fractions import Fraction

MODEL_NAME = "dsv4-mini"

# ---------------------------------------------------------------------------------------------
# Number formatting and helpers


def fmt_int(n):
    """12345 -> "12,345" (thousands separators line up with the tokenizer's 3-digit groups)."""
    return f"{n:,}"


def to_decimal(x):
    if isinstance(x, Fraction):
        return Decimal(x.numerator) / Decimal(x.denominator)
    return Decimal(x)


def fmt_num(x, places=2):
    """Exact value -> text: integers with separators, else rounded to `places` decimals with
    trailing zeros removed ("3.5", "42.16")."""
    if isinstance(x, Fraction) and x.denominator == 1:
        return fmt_int(x.numerator)
    if isinstance(x, int):
        return fmt_int(x)
    d = to_decimal(x)
    if d == d.to_integral_value():
        return fmt_int(int(d))
    q = d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    s = f"{q:,}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s


def fmt_exact(d):
    """An exact Decimal with all its digits ("42.1648128")."""
    s = f"{d.normalize():,f}"
    return s


def is_exact_at(x, places):
    d = to_decimal(x)
    return d == d.quantize(Decimal(1).scaleb(-places))


def rounded(x, places=2):
    d = to_decimal(x)
    return d.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def pick(rng, items, weights=None):
    if weights is None:
        return items[rng.randrange(len(items))]
    return rng.choices(items, weights=weights, k=1)[0]


def cap(s):
    return s[:1].upper() + s[1:]


def join_and(items):
    items = list(items)
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------------------------------------
# Arithmetic with step-by-step reasoning.  Each function returns (question, reasoning, answer
# sentence, value); reasoning computes the value, every intermediate number exact.


def _place_parts(n):
    """4582 -> [4000, 500, 80, 2] (non-zero place values, largest first)."""
    s = str(n)
    out = []
    for i, c in enumerate(s):
        if c != "0":
            out.append(int(c) * 10 ** (len(s) - 1 - i))
    return out or [0]


def _num_in_question(rng, n):
    return fmt_int(n) if n >= 1000 and rng.random() < 0.5 else str(n)


def arith_add(rng):
    k = pick(rng, [2, 2, 2, 3, 4])
    nums = [rng.randrange(10, pick(rng, [100, 1000, 10000, 100000])) for _ in range(k)]
    total = sum(nums)
    q_nums = [_num_in_question(rng, n) for n in nums]
    if k == 2:
        q = pick(rng, ["What is {a} + {b}?", "Compute {a} + {b}.", "Add {a} and {b}.",
                       "How much is {a} plus {b}?", "{a} + {b} = ?", "What's {a} plus {b}?"]
                 ).format(a=q_nums[0], b=q_nums[1])
    else:
        q = pick(rng, ["What is {e}?", "Add up {l}.", "What is the sum of {l}?",
                       "Compute {e}."]).format(e=" + ".join(q_nums), l=join_and(q_nums))
    steps = []
    acc = nums[0]
    for n in nums[1:]:
        if n >= 100 and len(nums) == 2:
            sub = [f"I add {fmt_int(n)} to {fmt_int(acc)} one place value at a time."]
            for part in _place_parts(n):
                sub.append(f"{fmt_int(acc)} + {fmt_int(part)} = {fmt_int(acc + part)}.")
                acc += part
            steps.append(" ".join(sub))
        else:
            steps.append(f"{fmt_int(acc)} + {fmt_int(n)} = {fmt_int(acc + n)}.")
            acc += n
    assert acc == total
    reasoning = " ".join(steps) + f" So the sum is {fmt_int(total)}."
    expr = " + ".join(fmt_int(n) for n in nums)
    return q, reasoning, f"{expr} = {fmt_int(total)}.", total


def arith_sub(rng):
    a = rng.randrange(100, pick(rng, [1000, 10000, 100000]))
    b = rng.randrange(10, a)
    qa, qb = _num_in_question(rng, a), _num_in_question(rng, b)
    q = pick(rng, ["What is {a} - {b}?", "Subtract {b} from {a}.", "What is {a} minus {b}?",
                   "Compute {a} - {b}.", "How much is {a} take away {b}?"]).format(a=qa, b=qb)
    sub = [f"I subtract {fmt_int(b)} from {fmt_int(a)} one place value at a time."]
    acc = a
    for part in _place_parts(b):
        sub.append(f"{fmt_int(acc)} - {fmt_int(part)} = {fmt_int(acc - part)}.")
        acc -= part
    assert acc == a - b
    reasoning = " ".join(sub) + f" So the difference is {fmt_int(acc)}."
    return q, reasoning, f"{fmt_int(a)} - {fmt_int(b)} = {fmt_int(acc)}.", acc


def arith_mul(rng):
    a = rng.randrange(2, pick(rng, [100, 1000, 10000]))
    b = rng.randrange(2, pick(rng, [10, 100, 100, 1000]))
    if rng.random() < 0.5:
        a, b = b, a
    big, small = (a, b) if a >= b else (b, a)
    qa, qb = _num_in_question(rng, a), _num_in_question(rng, b)
    q = pick(rng, ["What is {a} × {b}?", "What is {a} * {b}?", "Multiply {a} by {b}.",
                   "What is {a} times {b}?", "Compute {a} x {b}.", "How much is {a} times {b}?"]
             ).format(a=qa, b=qb)
    parts = _place_parts(small)
    if len(parts) == 1:
        if small < 10:
            reasoning = f"{fmt_int(big)} × {small} = {fmt_int(big * small)}."
            # Spell the single-digit product out by place value too.
            bp = _place_parts(big)
            if len(bp) > 1:
                terms = [f"{fmt_int(p)} × {small} = {fmt_int(p * small)}" for p in bp]
                reasoning = (f"I multiply each place value of {fmt_int(big)} by {small}: "
                             + "; ".join(terms) + ". Adding them: "
                             + " + ".join(fmt_int(p * small) for p in bp)
                             + f" = {fmt_int(big * small)}.")
        else:  # a single non-zero digit followed by zeros (20, 300, ...)
            lead = small // 10 ** (len(str(small)) - 1)
            reasoning = (f"{fmt_int(small)} = {lead} × {fmt_int(10 ** (len(str(small)) - 1))}. "
                         f"{fmt_int(big)} × {lead} = {fmt_int(big * lead)}, and multiplying by "
                         f"{fmt_int(10 ** (len(str(small)) - 1))} gives {fmt_int(big * small)}.")
    else:
        split = " + ".join(fmt_int(p) for p in parts)
        terms = [f"{fmt_int(big)} × {fmt_int(p)} = {fmt_int(big * p)}" for p in parts]
        reasoning = (f"I split {fmt_int(small)} into {split}. " + ". ".join(terms) + ". "
                     f"Adding the partial products: "
                     + " + ".join(fmt_int(big * p) for p in parts)
                     + f" = {fmt_int(big * small)}.")
    reasoning += f" So {fmt_int(a)} × {fmt_int(b)} = {fmt_int(a * b)}."
    return q, reasoning, f"{fmt_int(a)} × {fmt_int(b)} = {fmt_int(a * b)}.", a * b


def arith_div(rng):
    d = rng.randrange(2, pick(rng, [10, 13, 26, 100]))
    quotient = rng.randrange(2, pick(rng, [100, 1000, 10000]))
    rem = 0 if rng.random() < 0.6 else rng.randrange(1, d)
    n = d * quotient + rem
    qn, qd = _num_in_question(rng, n), str(d)
    q = pick(rng, ["What is {n} ÷ {d}?", "What is {n} / {d}?", "Divide {n} by {d}.",
                   "How much is {n} divided by {d}?", "Compute {n} / {d}."]).format(n=qn, d=qd)
    # Long division by chunks: take the largest multiple of d times a power of ten that fits.
    steps = [f"I divide {fmt_int(n)} by {d} in chunks."]
    left, got = n, 0
    p = 10 ** (len(str(n)))
    while p >= 1:
        k = left // (d * p)
        if k:
            steps.append(f"{d} × {fmt_int(k * p)} = {fmt_int(d * k * p)}, leaving "
                         f"{fmt_int(left - d * k * p)}.")
            left -= d * k * p
            got += k * p
        p //= 10
    assert got == quotient and left == rem
    if rem == 0:
        steps.append(f"Nothing is left, so {fmt_int(n)} ÷ {d} = {fmt_int(got)}.")
        ans = f"{fmt_int(n)} ÷ {d} = {fmt_int(got)}."
        value = Fraction(got)
    else:
        value = Fraction(n, d)
        rel = "=" if is_exact_at(Fraction(rem, d), 2) else "≈"
        steps.append(f"The quotient is {fmt_int(got)} with remainder {rem}, and "
                     f"{rem}/{d} {rel} {fmt_num(Fraction(rem, d), 2)}, "
                     f"so {fmt_int(n)} ÷ {d} {rel} {fmt_num(value, 2)}.")
        ans = (f"{fmt_int(n)} ÷ {d} is {fmt_int(got)} remainder {rem}, which is "
               f"{'about ' if not is_exact_at(value, 2) else ''}{fmt_num(value, 2)}.")
    return q, " ".join(steps), ans, value


def arith_percent(rng):
    pct = pick(rng, [5, 10, 12, 15, 20, 25, 30, 40, 50, 60, 75, 80, 90, 8, 35, 2.5, 12.5])
    base = rng.randrange(1, 400) * pick(rng, [1, 2, 4, 5, 10])
    p = Fraction(str(pct))
    val = p * base / 100
    ptxt = fmt_num(p)
    q = pick(rng, ["What is {p}% of {b}?", "Calculate {p} percent of {b}.",
                   "How much is {p}% of {b}?", "Find {p}% of {b}."]).format(p=ptxt, b=base)
    reasoning = (f"{ptxt}% of {fmt_int(base)} means {fmt_int(base)} × {ptxt} / 100. "
                 f"{fmt_int(base)} × {ptxt} = {fmt_num(p * base)}, and "
                 f"{fmt_num(p * base)} / 100 = {fmt_num(p * base / 100, 4)}.")
    if not is_exact_at(val, 2):
        reasoning += f" Rounded to two decimals: {fmt_num(val, 2)}."
    return q, reasoning, f"{ptxt}% of {fmt_int(base)} is {fmt_num(val, 2)}.", val


def arith_square(rng):
    a = rng.randrange(11, 100)
    q = pick(rng, ["What is {a} squared?", "What is {a}^2?", "Compute the square of {a}.",
                   "What is {a} × {a}?"]).format(a=a)
    t, u = a // 10 * 10, a % 10
    if u == 0:
        reasoning = f"{a} × {a} = {fmt_int(a * a)}."
    else:
        reasoning = (f"{a} × {a} = {a} × {t} + {a} × {u} = {fmt_int(a * t)} + {fmt_int(a * u)} "
                     f"= {fmt_int(a * a)}.")
    return q, reasoning, f"{a}² = {fmt_int(a * a)}.", a * a


def arith_average(rng):
    k = pick(rng, [3, 4, 5])
    nums = [rng.randrange(1, 100) for _ in range(k)]
    total = sum(nums)
    mean = Fraction(total, k)
    q = pick(rng, ["What is the average of {l}?", "Find the mean of {l}.",
                   "Compute the average of these numbers: {c}."]).format(
        l=join_and(str(n) for n in nums), c=", ".join(str(n) for n in nums))
    reasoning = (f"Sum: {' + '.join(str(n) for n in nums)} = {total}. There are {k} numbers, "
                 f"so the average is {total} / {k} = {fmt_num(mean, 2)}.")
    if not is_exact_at(mean, 2):
        reasoning = reasoning[:-1] + " (rounded to two decimals)."
    return q, reasoning, f"The average is {fmt_num(mean, 2)}.", mean


def arith_expr(rng):
    a, b, c = rng.randrange(2, 50), rng.randrange(2, 50), rng.randrange(2, 12)
    d = rng.randrange(1, 100)
    form = rng.randrange(3)
    if form == 0:
        expr, steps = f"({a} + {b}) × {c} - {d}", [
            f"Parentheses first: {a} + {b} = {a + b}.", f"Then {a + b} × {c} = {(a + b) * c}.",
            f"Then {(a + b) * c} - {d} = {(a + b) * c - d}."]
        val = (a + b) * c - d
    elif form == 1:
        expr, steps = f"{a} + {b} × {c}", [
            f"Multiplication comes before addition: {b} × {c} = {b * c}.",
            f"Then {a} + {b * c} = {a + b * c}."]
        val = a + b * c
    else:
        expr, steps = f"{a} × {c} - {b} + {d}", [
            f"Multiplication first: {a} × {c} = {a * c}.",
            f"Then from left to right: {a * c} - {b} = {a * c - b}, and {a * c - b} + {d} = "
            f"{a * c - b + d}."]
        val = a * c - b + d
    q = pick(rng, ["What is {e}?", "Evaluate {e}.", "Compute {e}.", "Work out {e}."]).format(
        e=expr)
    return q, " ".join(steps), f"{expr} = {fmt_int(val)}.", val


ARITH = [(arith_add, 3), (arith_sub, 2), (arith_mul, 3), (arith_div, 2), (arith_percent, 2),
         (arith_square, 1), (arith_average, 1), (arith_expr, 2)]


# ---------------------------------------------------------------------------------------------
# Unit conversions (exact factors; results rounded to two decimals)

# (from, to, factor as a decimal string, unit text from, unit text to, kind)
LINEAR_UNITS = [
    ("km", "mi", "0.621371", "kilometres", "miles"),
    ("mi", "km", "1.609344", "miles", "kilometres"),
    ("m", "ft", "3.28084", "metres", "feet"),
    ("ft", "m", "0.3048", "feet", "metres"),
    ("in", "cm", "2.54", "inches", "centimetres"),
    ("kg", "lb", "2.20462", "kilograms", "pounds"),
    ("lb", "kg", "0.45359237", "pounds", "kilograms"),
    ("L", "gal", "0.264172", "litres", "US gallons"),
    ("gal", "L", "3.785411784", "US gallons", "litres"),
    ("oz", "g", "28.349523125", "ounces", "grams"),
    ("h", "min", "60", "hours", "minutes"),
    ("min", "s", "60", "minutes", "seconds"),
    ("day", "h", "24", "days", "hours"),
    ("week", "day", "7", "weeks", "days"),
    ("km", "m", "1000", "kilometres", "metres"),
    ("m", "cm", "100", "metres", "centimetres"),
    ("kg", "g", "1000", "kilograms", "grams"),
    ("L", "mL", "1000", "litres", "millilitres"),
    ("m/s", "km/h", "3.6", "metres per second", "kilometres per hour"),
    ("mph", "km/h", "1.609344", "miles per hour", "kilometres per hour"),
]
SINGULAR = {"kilometres": "kilometre", "miles": "mile", "metres": "metre", "feet": "foot",
            "inches": "inch", "centimetres": "centimetre", "kilograms": "kilogram",
            "pounds": "pound", "litres": "litre", "US gallons": "US gallon",
            "ounces": "ounce", "grams": "gram", "hours": "hour", "minutes": "minute",
            "seconds": "second", "days": "day", "weeks": "week", "millilitres": "millilitre",
            "metres per second": "metre per second",
            "kilometres per hour": "kilometre per hour", "miles per hour": "mile per hour"}


def _quantity(rng):
    r = rng.random()
    if r < 0.5:
        return Decimal(rng.randrange(1, 200))
    if r < 0.8:
        return Decimal(rng.randrange(1, 2000)) / 10
    return Decimal(rng.randrange(1, 100000)) / 100


def units_linear(rng):
    src, dst, factor, name_src, name_dst = pick(rng, LINEAR_UNITS)
    x = _quantity(rng)
    f = Decimal(factor)
    exact = x * f
    xs = fmt_exact(x)
    q = pick(rng, ["Convert {x} {a} to {b}.", "How many {b} is {x} {a}?",
                   "What is {x} {a} in {b}?", "{x} {a} in {b}?",
                   "How many {b} are there in {x} {a}?"]).format(x=xs, a=name_src, b=name_dst)
    reasoning = (f"1 {SINGULAR[name_src]} is {fmt_exact(f)} {name_dst}, so I multiply: "
                 f"{xs} × {fmt_exact(f)} = {fmt_exact(exact)}. That is {fmt_exact(exact)} "
                 f"{name_dst}.")
    if not is_exact_at(exact, 2):
        reasoning += f" Rounded to two decimals: {fmt_num(exact, 2)} {name_dst}."
    approx = "" if is_exact_at(exact, 2) else "about "
    ans = f"{xs} {name_src} is {approx}{fmt_num(exact, 2)} {name_dst}."
    return q, reasoning, ans, exact


def units_temperature(rng):
    if rng.random() < 0.5:
        c = Decimal(rng.randrange(-40, 120)) if rng.random() < 0.7 else \
            Decimal(rng.randrange(-400, 1200)) / 10
        f = c * 9 / 5 + 32
        q = pick(rng, ["Convert {c} °C to Fahrenheit.", "What is {c} degrees Celsius in "
                       "Fahrenheit?", "{c}°C in °F?", "How much is {c} Celsius in Fahrenheit?"]
                 ).format(c=fmt_exact(c))
        step1 = c * 9 / 5
        reasoning = (f"°F = °C × 9 / 5 + 32. {fmt_exact(c)} × 9 / 5 = {fmt_num(step1, 4)}. "
                     f"{fmt_num(step1, 4)} + 32 = {fmt_num(f, 4)}.")
        ans = f"{fmt_exact(c)} °C is {fmt_num(f, 2)} °F."
        return q, reasoning, ans, f
    fval = Decimal(rng.randrange(-40, 250)) if rng.random() < 0.7 else \
        Decimal(rng.randrange(-400, 2500)) / 10
    diff = fval - 32
    c = Fraction(diff) * Fraction(5, 9)
    q = pick(rng, ["Convert {f} °F to Celsius.", "What is {f} degrees Fahrenheit in Celsius?",
                   "{f}°F in °C?", "How much is {f} Fahrenheit in Celsius?"]).format(
        f=fmt_exact(fval))
    reasoning = (f"°C = (°F - 32) × 5 / 9. {fmt_exact(fval)} - 32 = {fmt_exact(diff)}. "
                 f"{fmt_exact(diff)} × 5 / 9 = {fmt_num(c, 4)}.")
    if not is_exact_at(c, 2):
        reasoning += f" Rounded to two decimals: {fmt_num(c, 2)}."
    approx = "" if is_exact_at(c, 2) else "about "
    return q, reasoning, f"{fmt_exact(fval)} °F is {approx}{fmt_num(c, 2)} °C.", c


UNITS = [(units_linear, 4), (units_temperature, 1)]


# ---------------------------------------------------------------------------------------------
# Word problems

NAMES = ["Anna", "Ben", "Carlos", "Dana", "Elif", "Farah", "George", "Hana", "Ivan", "Julia",
         "Kenji", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq",
         "Uma", "Victor", "Wen", "Yusuf", "Zoe", "Amara", "Bruno", "Chloe", "Diego", "Emma"]


def word_problem(rng):
    form = rng.randrange(6)
    name = pick(rng, NAMES)
    if form == 0:
        per, n = rng.randrange(2, 25), rng.randrange(2, 40)
        item, box = pick(rng, [("eggs", "box"), ("pencils", "pack"), ("apples", "crate"),
                               ("cookies", "tin"), ("books", "shelf"), ("chairs", "row")])
        boxes = "shelves" if box == "shelf" else box + "es" if box.endswith("x") else box + "s"
        q = f"A {box} holds {per} {item}. How many {item} are in {n} {boxes}?"
        r = f"Each {box} holds {per} {item}, and there are {n} {boxes}: {n} × {per} = {n * per}."
        return q, r, f"There are {n * per} {item} in {n} {boxes}.", n * per
    if form == 1:
        have, give = rng.randrange(20, 200), 0
        give = rng.randrange(1, have)
        item = pick(rng, ["marbles", "stickers", "apples", "coins", "cards", "stamps"])
        other = pick(rng, [x for x in NAMES if x != name])
        q = f"{name} has {have} {item} and gives {give} to {other}. How many {item} does {name} have left?"
        r = f"{name} starts with {have} and gives away {give}: {have} - {give} = {have - give}."
        return q, r, f"{name} has {have - give} {item} left.", have - give
    if form == 2:
        speed, t = rng.randrange(20, 130), Fraction(rng.randrange(1, 20), 2)
        dist = speed * t
        q = f"A train travels at {speed} km/h for {fmt_num(t)} hours. How far does it go?"
        r = f"Distance = speed × time = {speed} × {fmt_num(t)} = {fmt_num(dist)} km."
        return q, r, f"It travels {fmt_num(dist)} km.", dist
    if form == 3:
        price = rng.randrange(8, 300)
        off = pick(rng, [10, 15, 20, 25, 30, 40, 50])
        disc = Fraction(price * off, 100)
        final = price - disc
        q = f"A jacket costs ${price} and is {off}% off. What is the sale price?"
        r = (f"The discount is {off}% of {price} dollars: {price} × {off} / 100 = "
             f"{fmt_num(disc, 2)}. The sale price is {price} - {fmt_num(disc, 2)} = "
             f"{fmt_num(final, 2)} dollars.")
        return q, r, f"The sale price is ${rounded(final, 2)}.", final
    if form == 4:
        total, people = rng.randrange(12, 400), rng.randrange(2, 9)
        share = Fraction(total, people)
        q = f"{people} friends split a bill of ${total} equally. How much does each pay?"
        r = f"Each pays {total} / {people} = {fmt_num(share, 4)}"
        r += " dollars." if is_exact_at(share, 2) else f", which rounds to {fmt_num(share, 2)} dollars."
        return q, r, f"Each person pays ${rounded(share, 2)}.", share
    start_h, start_m = rng.randrange(6, 20), pick(rng, [0, 10, 15, 20, 30, 40, 45, 50])
    dur = rng.randrange(15, 300)
    end = start_h * 60 + start_m + dur
    eh, em = divmod(end % (24 * 60), 60)
    q = (f"A film starts at {start_h:02d}:{start_m:02d} and lasts {dur} minutes. "
         f"When does it end?")
    r = (f"{dur} minutes is {dur // 60} h {dur % 60} min. {start_h:02d}:{start_m:02d} plus "
         f"{dur // 60} h {dur % 60} min is {eh:02d}:{em:02d}.")
    return q, r, f"It ends at {eh:02d}:{em:02d}.", end


# ---------------------------------------------------------------------------------------------
# Tools: families of OpenAI function tools.  Each family picks a name, a description and
# parameter names from its variants, and makes calls: (request phrase, arguments, result,
# answer sentence).  Argument values always fit the schema the family built.

CITIES = [("Paris", "France"), ("London", "UK"), ("Tokyo", "Japan"), ("New York", "USA"),
          ("Berlin", "Germany"), ("Madrid", "Spain"), ("Rome", "Italy"), ("Sydney", "Australia"),
          ("Toronto", "Canada"), ("Cairo", "Egypt"), ("Mumbai", "India"), ("Beijing", "China"),
          ("Seoul", "South Korea"), ("Mexico City", "Mexico"), ("Lagos", "Nigeria"),
          ("Nairobi", "Kenya"), ("Lima", "Peru"), ("Oslo", "Norway"), ("Lisbon", "Portugal"),
          ("Dublin", "Ireland"), ("Vienna", "Austria"), ("Prague", "Czechia"),
          ("Istanbul", "Turkey"), ("Bangkok", "Thailand"), ("Singapore", "Singapore"),
          ("Buenos Aires", "Argentina"), ("Sao Paulo", "Brazil"), ("Cape Town", "South Africa"),
          ("Helsinki", "Finland"), ("Athens", "Greece"), ("Warsaw", "Poland"),
          ("Amsterdam", "Netherlands"), ("Chicago", "USA"), ("San Francisco", "USA"),
          ("Vancouver", "Canada"), ("Reykjavik", "Iceland"), ("Hanoi", "Vietnam"),
          ("Jakarta", "Indonesia"), ("Manila", "Philippines"), ("Dubai", "UAE"),
          ("Zurich", "Switzerland"), ("Stockholm", "Sweden"), ("Copenhagen", "Denmark"),
          ("Edinburgh", "UK"), ("Boston", "USA"), ("Seattle", "USA"), ("Osaka", "Japan"),
          ("Marseille", "France"), ("Lyon", "France"), ("Munich", "Germany"),
          ("Barcelona", "Spain"), ("Milan", "Italy"), ("Kyoto", "Japan"), ("Denver", "USA"),
          ("Auckland", "New Zealand"), ("Montreal", "Canada"), ("Santiago", "Chile"),
          ("Bogota", "Colombia"), ("Accra", "Ghana"), ("Casablanca", "Morocco")]


def weather_condition(rng, t_c):
    """A condition that fits the temperature (no snow at 30 °C)."""
    if t_c <= 0:
        return pick(rng, ["snow", "light snow", "clear", "cloudy", "fog", "overcast"])
    if t_c <= 12:
        return pick(rng, ["cloudy", "overcast", "light rain", "rain", "drizzle", "fog", "clear",
                          "windy", "partly cloudy"])
    if t_c <= 24:
        return pick(rng, ["sunny", "partly cloudy", "cloudy", "light rain", "rain", "clear",
                          "windy", "thunderstorms"])
    return pick(rng, ["sunny", "clear", "partly cloudy", "thunderstorms", "hot and humid"])


def _summary(result):
    """A result dict in words for the reasoning: top-level fields, lists counted."""
    parts = []
    for k, v in result.items():
        if isinstance(v, list):
            parts.append(f"{len(v)} {k}")
        elif isinstance(v, dict):
            parts.append(f"{k} " + ", ".join(f"{a} {b}" for a, b in v.items()))
        else:
            parts.append(f"{k} {v}")
    return ", ".join(parts)


def _call_id(rng):
    return "call_" + "".join(pick(rng, "0123456789abcdef") for _ in range(12))


def _wrap(name, desc, props, required):
    params = {"type": "object", "properties": props}
    if required:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": desc,
                                             "parameters": params}}


class Family:
    """Base: a tool family instantiated with one naming variant.  `call` phrases are noun
    phrases for question families (ask = True: "the weather in Paris") and imperative clauses
    otherwise ("send an email to ...")."""
    topic = ""
    ask = False

    def __init__(self, rng):
        self.rng = rng

    def tool(self):
        raise NotImplementedError

    def call(self, rng):
        """-> (request phrase, args dict, result dict, answer sentence)"""
        raise NotImplementedError

    def thought(self, args):
        return (f"The {self.name} tool does this, so I'll call it with "
                + join_and(f"{k} {json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
                + ".")




class Weather(Family):
    ask = True
    topic = "weather"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["get_weather", "get_current_weather", "weather_lookup",
                               "fetch_weather", "current_weather", "check_weather", "getWeather",
                               "weather_now", "lookup_weather"],
                         [8, 3, 1, 1, 1, 1, 1, 1, 1])
        self.loc = pick(rng, ["location", "city", "place", "city_name", "where"], [6, 2, 1, 1, 1])
        self.unit = pick(rng, ["unit", "units", "temperature_unit", "scale"], [5, 1, 1, 1])
        self.values = pick(rng, [("celsius", "fahrenheit"), ("metric", "imperial"), ("C", "F")],
                           [6, 1, 1])
        self.with_country = rng.random() < 0.3
        self.unit_required = rng.random() < 0.15
        self.desc = pick(rng, ["Get the current weather in a given location",
                               "Get the current weather for a city",
                               "Look up current weather conditions",
                               "Returns temperature and conditions for a place",
                               "Current weather report for a location"])

    def tool(self):
        loc_desc = ("The city and country, e.g. Paris, France" if self.with_country else
                    pick(self.rng, ["The city, e.g. San Francisco", "City name",
                                    "The city to look up", "Name of the city"]))
        props = {self.loc: {"type": "string", "description": loc_desc},
                 self.unit: {"type": "string", "enum": list(self.values)}}
        if self.rng.random() < 0.5:
            props[self.unit]["description"] = "Temperature unit"
        req = [self.loc] + ([self.unit] if self.unit_required else [])
        return _wrap(self.name, self.desc, props, req)

    def call(self, rng):
        city, country = pick(rng, CITIES)
        metric = rng.random() < 0.75
        asked_unit = rng.random() < 0.3
        unit_val = self.values[0] if metric else self.values[1]
        place = f"{city}, {country}" if self.with_country else city
        args = {self.loc: place}
        if asked_unit or self.unit_required:
            args[self.unit] = unit_val
        t_c = rng.randrange(-15, 40)
        cond = weather_condition(rng, t_c)
        hum = rng.randrange(20, 100)
        if unit_val == self.values[1]:
            temp, sym = round(t_c * 9 / 5 + 32), "°F"
        else:
            temp, sym = t_c, "°C"
        result = {"location": place, "temperature": temp, "unit": unit_val, "condition": cond,
                  "humidity": hum}
        if rng.random() < 0.4:
            result["wind_kph"] = rng.randrange(0, 60)
        if asked_unit:
            uword = "Celsius" if metric else "Fahrenheit"
            phrase = pick(rng, [f"the weather in {city} in {uword}",
                                f"the temperature in {city} in {uword}"])
        else:
            phrase = pick(rng, [f"the weather in {city}", f"the weather in {city}",
                                f"the current weather in {city}", f"the temperature in {city}"])
        ans = f"The weather in {city}: {temp} {sym}, {cond}, humidity {hum}%"
        if "wind_kph" in result:
            ans += f", wind {result['wind_kph']} km/h"
        return phrase, args, result, ans + "."


class Forecast(Family):
    ask = True
    topic = "weather"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["get_forecast", "weather_forecast", "forecast", "get_weather_forecast"])
        self.loc = pick(rng, ["location", "city"])
        self.days = pick(rng, ["days", "num_days", "horizon_days"])

    def tool(self):
        return _wrap(self.name, "Get a daily weather forecast",
                     {self.loc: {"type": "string"},
                      self.days: {"type": "integer", "description": "Number of days (1-7)"}},
                     [self.loc, self.days])

    def call(self, rng):
        city, _ = pick(rng, CITIES)
        n = rng.randrange(2, 6)
        days = []
        names = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
        start = rng.randrange(7)
        for i in range(n):
            lo = rng.randrange(-10, 25)
            days.append({"day": names[(start + i) % 7], "high": lo + rng.randrange(3, 12),
                         "low": lo, "condition": weather_condition(rng, lo + 4)})
        args = {self.loc: city, self.days: n}
        phrase = f"the {n}-day forecast for {city}"
        parts = [f"{d['day']}: {d['condition']}, {d['low']} to {d['high']} °C" for d in days]
        hottest = max(days, key=lambda d: d["high"])
        ans = (f"Forecast for {city}: " + "; ".join(parts) +
               f". The warmest day is {hottest['day']} at {hottest['high']} °C.")
        return phrase, args, {"location": city, "forecast": days}, ans


CURRENCIES = [("USD", "US dollars"), ("EUR", "euros"), ("GBP", "British pounds"),
              ("JPY", "Japanese yen"), ("CHF", "Swiss francs"), ("CAD", "Canadian dollars"),
              ("AUD", "Australian dollars"), ("CNY", "Chinese yuan"), ("INR", "Indian rupees"),
              ("SEK", "Swedish kronor"), ("MXN", "Mexican pesos"), ("BRL", "Brazilian reais")]


class Currency(Family):
    topic = "money"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["convert_currency", "currency_convert", "exchange_money",
                               "fx_convert", "convertCurrency"])
        self.amount = pick(rng, ["amount", "value", "sum"])
        self.src = pick(rng, ["from_currency", "from", "source_currency", "base"])
        self.dst = pick(rng, ["to_currency", "to", "target_currency", "quote"])
        self.enum = rng.random() < 0.5

    def tool(self):
        cur = {"type": "string", "description": "ISO 4217 code, e.g. USD"}
        if self.enum:
            cur = {"type": "string", "enum": [c for c, _ in CURRENCIES]}
        return _wrap(self.name, "Convert an amount of money between currencies",
                     {self.amount: {"type": "number"}, self.src: dict(cur), self.dst: dict(cur)},
                     [self.amount, self.src, self.dst])

    def call(self, rng):
        (a, an), (b, bn) = rng.sample(CURRENCIES, 2)
        amount = pick(rng, [rng.randrange(1, 1000), rng.randrange(100, 100000) / 100])
        rate = Decimal(rng.randrange(50, 20000)) / 1000
        converted = rounded(Decimal(str(amount)) * rate, 2)
        args = {self.amount: amount, self.src: a, self.dst: b}
        result = {"amount": amount, "from": a, "to": b, "rate": float(rate),
                  "converted": float(converted)}
        amt = fmt_num(Decimal(str(amount)), 2)
        phrase = pick(rng, [f"convert {amt} {a} to {b}", f"convert {amt} {an} into {bn}"])
        ans = f"{amt} {a} is {fmt_num(converted, 2)} {b} (rate {fmt_exact(rate)})."
        return phrase, args, result, ans


class Stock(Family):
    ask = True
    topic = "money"
    SYMBOLS = ["ACME", "GLOBX", "INIT", "UMBR", "WONK", "STRK", "NOVA", "PIXL", "ORBT", "ZEPH"]

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["get_stock_price", "stock_quote", "get_quote", "lookup_ticker"])
        self.sym = pick(rng, ["symbol", "ticker", "stock"])

    def tool(self):
        return _wrap(self.name, "Get the latest price of a stock",
                     {self.sym: {"type": "string", "description": "Ticker symbol"}}, [self.sym])

    def call(self, rng):
        s = pick(rng, self.SYMBOLS)
        price = rng.randrange(500, 90000) / 100
        ch = rng.randrange(-600, 600) / 100
        res = {"symbol": s, "price": price, "currency": "USD", "change_percent": ch}
        word = "up" if ch > 0 else "down" if ch < 0 else "unchanged"
        tail = f", {word} {abs(ch)}% today" if ch else ", unchanged today"
        return (f"the stock price of {s}", {self.sym: s}, res,
                f"{s} is trading at ${price:.2f}{tail}.")


TOPICS = ["solar power", "the history of tea", "python decorators", "honey bees",
          "the moon landing", "sourdough bread", "electric cars", "volcanoes",
          "chess openings", "black holes", "the printing press", "coral reefs"]


class Search(Family):
    topic = "search"

    def __init__(self, rng, definitions=None):
        super().__init__(rng)
        self.name = pick(rng, ["search_web", "web_search", "search", "internet_search",
                               "find_pages"])
        self.query = pick(rng, ["query", "q", "search_query", "terms"])
        self.limit = pick(rng, ["max_results", "limit", "num_results", "count"])
        self.defs = definitions or []

    def tool(self):
        return _wrap(self.name, "Search the web and return matching pages",
                     {self.query: {"type": "string"},
                      self.limit: {"type": "integer", "description": "How many results"}},
                     [self.query])

    def call(self, rng):
        if self.defs and rng.random() < 0.7:
            d = pick(rng, self.defs)
            term, meaning = d.term, d.meaning
            query = f"what does {term} mean"
            results = [{"title": f"{term} - definition", "snippet": f"{term}: {meaning}"}]
            ans = f"According to the top result, {term} means: {meaning}"
            phrase = f"search the web for what \"{term}\" means"
        else:
            t = pick(rng, TOPICS)
            query = t
            titles = [f"An introduction to {t}", f"{cap(t)} explained", f"A short history of {t}",
                      f"Ten facts about {t}"]
            rng.shuffle(titles)
            results = [{"title": titles[i], "url": f"https://example.org/{i}"}
                       for i in range(rng.randrange(1, 4))]
            ans = ("I found: " + "; ".join(f"\"{r['title']}\" ({r['url']})" for r in results) +
                   ".")
            phrase = f"search the web for pages about {t}"
        args = {self.query: query}
        if rng.random() < 0.5:
            args[self.limit] = rng.randrange(1, 10)
            results = results[:args[self.limit]]
        return phrase, args, {"results": results}, ans.rstrip(".") + "."


EMAIL_USERS = ["alice@example.com", "bob@example.org", "carol@example.net", "dev-team@example.com",
               "j.smith@example.com", "maria@example.org", "support@example.com"]


class Email(Family):
    topic = "email"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["send_email", "email_send", "compose_email", "sendMail"])
        self.to = pick(rng, ["to", "recipient", "to_address"])
        self.subject = pick(rng, ["subject", "title"])
        self.body = pick(rng, ["body", "message", "text"])
        self.cc = pick(rng, ["cc", "copy_to"])
        self.urgent = pick(rng, ["urgent", "high_priority", "important"])

    def tool(self):
        return _wrap(self.name, "Send an email",
                     {self.to: {"type": "string"}, self.subject: {"type": "string"},
                      self.body: {"type": "string"},
                      self.cc: {"type": "array", "items": {"type": "string"}},
                      self.urgent: {"type": "boolean"}},
                     [self.to, self.subject, self.body])

    def call(self, rng):
        to = pick(rng, EMAIL_USERS)
        topic = pick(rng, ["the meeting tomorrow", "the quarterly report", "lunch on Friday",
                           "the project deadline", "the new office hours", "my vacation"])
        body = pick(rng, [f"Hi, just a note about {topic}. Talk soon.",
                          f"Hello, can we discuss {topic}? Thanks.",
                          f"A quick reminder about {topic}."])
        args = {self.to: to, self.subject: cap(topic), self.body: body}
        extra = ""
        if rng.random() < 0.35:
            cc = rng.sample([u for u in EMAIL_USERS if u != to], rng.randrange(1, 3))
            args[self.cc] = cc
            extra += f", cc {join_and(cc)}"
        if rng.random() < 0.3:
            args[self.urgent] = True
            extra += ", marked urgent"
        phrase = f"send an email to {to} about {topic}{extra}"
        mid = "msg-" + str(rng.randrange(10000, 99999))
        return (phrase, args, {"status": "sent", "message_id": mid},
                f"The email to {to} with the subject \"{cap(topic)}\" was sent (id {mid}).")


class Calendar(Family):
    topic = "calendar"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["create_event", "add_calendar_event", "schedule_meeting",
                               "calendar_add"])
        self.title = pick(rng, ["title", "summary", "name"])
        self.date = pick(rng, ["date", "day"])
        self.start = pick(rng, ["start_time", "time", "starts_at"])
        self.duration = pick(rng, ["duration_minutes", "length_minutes", "minutes"])
        self.attendees = pick(rng, ["attendees", "guests", "participants"])

    def tool(self):
        return _wrap(self.name, "Create a calendar event",
                     {self.title: {"type": "string"},
                      self.date: {"type": "string", "description": "YYYY-MM-DD"},
                      self.start: {"type": "string", "description": "HH:MM, 24-hour"},
                      self.duration: {"type": "integer"},
                      self.attendees: {"type": "array", "items": {"type": "string"}}},
                     [self.title, self.date, self.start])

    def call(self, rng):
        title = pick(rng, ["Team sync", "Dentist", "Project review", "Coffee with Sam",
                           "Budget planning", "Yoga class", "Interview", "Book club"])
        month, day = rng.randrange(1, 13), rng.randrange(1, 29)
        date = f"2026-{month:02d}-{day:02d}"
        h, m = rng.randrange(7, 20), pick(rng, [0, 15, 30, 45])
        args = {self.title: title, self.date: date, self.start: f"{h:02d}:{m:02d}"}
        phrase = f"create a \"{title}\" event on {date} at {h:02d}:{m:02d}"
        if rng.random() < 0.6:
            dur = pick(rng, [15, 30, 45, 60, 90, 120])
            args[self.duration] = dur
            phrase += f" for {dur} minutes"
        if rng.random() < 0.4:
            people = rng.sample(NAMES, rng.randrange(1, 4))
            args[self.attendees] = people
            phrase += f" with {join_and(people)}"
        eid = "evt_" + str(rng.randrange(1000, 9999))
        return (phrase, args, {"status": "created", "event_id": eid},
                f"\"{title}\" is on your calendar for {date} at {h:02d}:{m:02d} (event {eid}).")


class Reminder(Family):
    topic = "reminder"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["set_reminder", "create_reminder", "remind_me", "add_reminder"])
        self.text = pick(rng, ["text", "message", "what"])
        self.time = pick(rng, ["time", "when", "at"])
        self.repeat = pick(rng, ["repeat", "recurrence", "frequency"])

    def tool(self):
        return _wrap(self.name, "Set a reminder",
                     {self.text: {"type": "string"},
                      self.time: {"type": "string", "description": "HH:MM"},
                      self.repeat: {"type": "string", "enum": ["none", "daily", "weekly"]}},
                     [self.text, self.time])

    def call(self, rng):
        what = pick(rng, ["call mom", "take the medicine", "water the plants", "buy milk",
                          "stretch", "check the oven", "submit the timesheet", "walk the dog"])
        h, m = rng.randrange(6, 23), pick(rng, [0, 10, 15, 30, 45])
        args = {self.text: what, self.time: f"{h:02d}:{m:02d}"}
        rep = pick(rng, ["none", "daily", "weekly", None, None])
        phrase = f"set a reminder to {what} at {h:02d}:{m:02d}"
        if rep:
            args[self.repeat] = rep
            if rep != "none":
                phrase += f" every {'day' if rep == 'daily' else 'week'}"
        when = {"daily": " every day", "weekly": " every week"}.get(rep, "")
        return (phrase, args, {"status": "ok"},
                f"I'll remind you to {what} at {h:02d}:{m:02d}{when}.")


class Timer(Family):
    topic = "timer"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["set_timer", "start_timer", "timer"])
        self.minutes = pick(rng, ["minutes", "duration_minutes", "length"])
        self.label = pick(rng, ["label", "name"])

    def tool(self):
        return _wrap(self.name, "Start a countdown timer",
                     {self.minutes: {"type": "number"}, self.label: {"type": "string"}},
                     [self.minutes])

    def call(self, rng):
        mins = pick(rng, [1, 2, 3, 5, 8, 10, 12, 15, 20, 25, 30, 45, 0.5, 1.5])
        args = {self.minutes: mins}
        what = pick(rng, ["pasta", "tea", "eggs", "a break", "the laundry", None])
        phrase = f"start a {fmt_num(Decimal(str(mins)))}-minute timer"
        if what:
            args[self.label] = what
            phrase += f" for {what}"
        return (phrase, args, {"status": "running", "ends_in_seconds": int(mins * 60)},
                f"Your {fmt_num(Decimal(str(mins)))}-minute timer"
                + (f" for {what}" if what else "") + f" is running ({int(mins * 60)} seconds).")


class Calculator(Family):
    ask = True
    topic = "math"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["calculator", "calculate", "evaluate_expression", "math_eval"])
        self.expr = pick(rng, ["expression", "expr", "formula"])

    def tool(self):
        return _wrap(self.name, "Evaluate an arithmetic expression",
                     {self.expr: {"type": "string"}}, [self.expr])

    def call(self, rng):
        a, b = rng.randrange(2, 10000), rng.randrange(2, 1000)
        op = pick(rng, ["+", "-", "*"])
        val = a + b if op == "+" else a - b if op == "-" else a * b
        return (f"{a} {op} {b}", {self.expr: f"{a} {op} {b}"}, {"result": val},
                f"{a} {op} {b} = {fmt_int(val)}.")


PHRASES = {"hello": {"French": "bonjour", "Spanish": "hola", "German": "hallo",
                     "Italian": "ciao"},
           "thank you": {"French": "merci", "Spanish": "gracias", "German": "danke",
                         "Italian": "grazie"},
           "good morning": {"French": "bonjour", "Spanish": "buenos días",
                            "German": "guten Morgen", "Italian": "buongiorno"},
           "goodbye": {"French": "au revoir", "Spanish": "adiós", "German": "auf Wiedersehen",
                       "Italian": "arrivederci"},
           "please": {"French": "s'il vous plaît", "Spanish": "por favor", "German": "bitte",
                      "Italian": "per favore"},
           "good night": {"French": "bonne nuit", "Spanish": "buenas noches",
                          "German": "gute Nacht", "Italian": "buona notte"},
           "yes": {"French": "oui", "Spanish": "sí", "German": "ja", "Italian": "sì"},
           "water": {"French": "eau", "Spanish": "agua", "German": "Wasser", "Italian": "acqua"}}


class Translate(Family):
    topic = "translate"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["translate", "translate_text", "translation"])
        self.text = pick(rng, ["text", "source_text", "phrase"])
        self.lang = pick(rng, ["target_language", "to_language", "language", "target"])

    def tool(self):
        return _wrap(self.name, "Translate text into another language",
                     {self.text: {"type": "string"},
                      self.lang: {"type": "string",
                                  "enum": ["French", "Spanish", "German", "Italian"]}},
                     [self.text, self.lang])

    def call(self, rng):
        phrase = pick(rng, sorted(PHRASES))
        lang = pick(rng, ["French", "Spanish", "German", "Italian"])
        out = PHRASES[phrase][lang]
        return (f"translate \"{phrase}\" into {lang}", {self.text: phrase, self.lang: lang},
                {"translation": out}, f"\"{cap(phrase)}\" in {lang} is \"{out}\".")


RESTAURANTS = ["Luigi's Trattoria", "The Blue Door", "Sakura House", "El Patio", "Green Leaf",
               "Harbor Grill", "Spice Route", "Cafe Lumiere"]


class Restaurant(Family):
    topic = "booking"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["book_table", "reserve_table", "make_reservation",
                               "restaurant_booking"])
        self.rest = pick(rng, ["restaurant", "venue", "restaurant_name"])
        self.size = pick(rng, ["party_size", "guests", "people"])
        self.date = pick(rng, ["date", "day"])
        self.time = pick(rng, ["time", "at"])
        self.outdoor = pick(rng, ["outdoor", "outdoor_seating", "terrace"])

    def tool(self):
        return _wrap(self.name, "Reserve a table at a restaurant",
                     {self.rest: {"type": "string"}, self.size: {"type": "integer"},
                      self.date: {"type": "string", "description": "YYYY-MM-DD"},
                      self.time: {"type": "string", "description": "HH:MM"},
                      self.outdoor: {"type": "boolean"}},
                     [self.rest, self.size, self.date, self.time])

    def call(self, rng):
        r = pick(rng, RESTAURANTS)
        n = rng.randrange(1, 11)
        date = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        t = f"{rng.randrange(17, 22):02d}:{pick(rng, [0, 30]):02d}"
        args = {self.rest: r, self.size: n, self.date: date, self.time: t}
        phrase = f"book a table for {n} at {r} on {date} at {t}"
        if rng.random() < 0.4:
            o = rng.random() < 0.6
            args[self.outdoor] = o
            phrase += ", outside" if o else ", indoors"
        code = "R-" + str(rng.randrange(1000, 9999))
        return (phrase, args, {"status": "confirmed", "confirmation": code},
                f"Your table for {n} at {r} on {date} at {t} is confirmed (code {code}).")


class Flights(Family):
    topic = "travel"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["search_flights", "find_flights", "flight_search"])
        self.origin = pick(rng, ["origin", "from_city", "departure"])
        self.dest = pick(rng, ["destination", "to_city", "arrival"])
        self.date = pick(rng, ["date", "departure_date"])
        self.pax = pick(rng, ["passengers", "travellers", "adults"])
        self.nonstop = pick(rng, ["nonstop_only", "direct", "nonstop"])
        self.cabin = pick(rng, ["cabin", "class", "cabin_class"])

    def tool(self):
        return _wrap(self.name, "Search for flights between two cities",
                     {self.origin: {"type": "string"}, self.dest: {"type": "string"},
                      self.date: {"type": "string", "description": "YYYY-MM-DD"},
                      self.pax: {"type": "integer"}, self.nonstop: {"type": "boolean"},
                      self.cabin: {"type": "string",
                                   "enum": ["economy", "premium", "business", "first"]}},
                     [self.origin, self.dest, self.date])

    def call(self, rng):
        (a, _), (b, _) = rng.sample(CITIES, 2)
        date = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        args = {self.origin: a, self.dest: b, self.date: date}
        phrase = f"find flights from {a} to {b} on {date}"
        if rng.random() < 0.4:
            n = rng.randrange(1, 5)
            args[self.pax] = n
            phrase += f" for {n} passenger{'s' if n > 1 else ''}"
        if rng.random() < 0.3:
            args[self.nonstop] = True
            phrase += ", nonstop only"
        if rng.random() < 0.3:
            c = pick(rng, ["economy", "premium", "business", "first"])
            args[self.cabin] = c
            phrase += f", {c} class"
        flights = []
        for _ in range(rng.randrange(1, 4)):
            h = rng.randrange(5, 22)
            flights.append({"flight": pick(rng, ["XA", "QB", "LM", "ZR"]) + str(rng.randrange(100, 999)),
                            "depart": f"{h:02d}:{pick(rng, [0, 15, 30, 45]):02d}",
                            "price": rng.randrange(60, 1500)})
        best = min(flights, key=lambda f: f["price"])
        ans = (f"I found {len(flights)} flight{'s' if len(flights) > 1 else ''} from {a} to {b} "
               f"on {date}. The cheapest is {best['flight']}, departing at {best['depart']}, "
               f"for ${best['price']}.")
        return phrase, args, {"flights": flights}, ans


class Directions(Family):
    topic = "travel"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["get_directions", "route", "plan_route", "directions"])
        self.src = pick(rng, ["origin", "start", "from_place"])
        self.dst = pick(rng, ["destination", "end", "to_place"])
        self.mode = pick(rng, ["mode", "travel_mode", "by"])

    def tool(self):
        return _wrap(self.name, "Get travel distance and time between two places",
                     {self.src: {"type": "string"}, self.dst: {"type": "string"},
                      self.mode: {"type": "string",
                                  "enum": ["driving", "walking", "cycling", "transit"]}},
                     [self.src, self.dst])

    def call(self, rng):
        places = ["the station", "the airport", "the museum", "the old town", "the stadium",
                  "the university", "the harbour", "the zoo", "the city hall"]
        a, b = rng.sample(places, 2)
        city, _ = pick(rng, CITIES)
        args = {self.src: f"{cap(a[4:])}, {city}", self.dst: f"{cap(b[4:])}, {city}"}
        mode = pick(rng, ["driving", "walking", "cycling", "transit", None])
        phrase = f"give me directions from {a} to {b} in {city}"
        if mode:
            args[self.mode] = mode
            phrase += f" by {'public transport' if mode == 'transit' else mode.replace('ing', '') if mode != 'cycling' else 'bike'}"
        dist = rng.randrange(5, 300) / 10
        mins = rng.randrange(5, 120)
        return (phrase, args, {"distance_km": dist, "duration_minutes": mins},
                f"From {a} to {b} in {city} is {dist} km, about {mins} minutes"
                + (f" {'by public transport' if mode == 'transit' else 'by ' + ('bike' if mode == 'cycling' else 'car' if mode == 'driving' else 'walking')}" if mode else "")
                + ".")


class Dictionary(Family):
    topic = "dictionary"

    def __init__(self, rng, definitions=None):
        super().__init__(rng)
        self.name = pick(rng, ["define_word", "lookup_word", "dictionary_lookup", "get_definition"])
        self.word = pick(rng, ["word", "term", "query"])
        self.defs = [d for d in (definitions or []) if d.source == "wordnet"] or [
            type("D", (), {"term": "lighthouse", "meaning": "a tower with a light that gives "
                           "warning of shoals to passing ships", "extra": {"pos": "noun"}})()]

    def tool(self):
        return _wrap(self.name, "Look up the definition of an English word",
                     {self.word: {"type": "string"}}, [self.word])

    def call(self, rng):
        d = pick(rng, self.defs)
        pos = d.extra.get("pos", "word")
        return (f"look up the definition of \"{d.term}\"", {self.word: d.term},
                {"word": d.term, "part_of_speech": pos, "definition": d.meaning},
                f"\"{cap(d.term)}\" ({pos}) means: {d.meaning}.")


class SmartHome(Family):
    topic = "home"

    def __init__(self, rng):
        super().__init__(rng)
        self.lights = rng.random() < 0.5
        if self.lights:
            self.name = pick(rng, ["control_lights", "set_lights", "lights"])
            self.room = pick(rng, ["room", "area"])
            self.on = pick(rng, ["on", "power", "state_on"])
            self.level = pick(rng, ["brightness", "level", "dim_percent"])
        else:
            self.name = pick(rng, ["set_thermostat", "thermostat", "set_temperature"])
            self.temp = pick(rng, ["temperature", "target", "degrees"])
            self.mode = pick(rng, ["mode", "hvac_mode"])

    def tool(self):
        if self.lights:
            return _wrap(self.name, "Turn lights on or off and set their brightness",
                         {self.room: {"type": "string"}, self.on: {"type": "boolean"},
                          self.level: {"type": "integer", "description": "0-100"}},
                         [self.room, self.on])
        return _wrap(self.name, "Set the thermostat",
                     {self.temp: {"type": "number", "description": "Degrees Celsius"},
                      self.mode: {"type": "string", "enum": ["heat", "cool", "auto"]}},
                     [self.temp])

    def call(self, rng):
        if self.lights:
            room = pick(rng, ["kitchen", "living room", "bedroom", "office", "hallway", "garage"])
            on = rng.random() < 0.7
            args = {self.room: room, self.on: on}
            phrase = f"turn {'on' if on else 'off'} the lights in the {room}"
            if on and rng.random() < 0.5:
                lvl = pick(rng, [10, 20, 25, 30, 40, 50, 60, 75, 80, 100])
                args[self.level] = lvl
                phrase += f" at {lvl}% brightness"
            return (phrase, args, {"status": "ok", "room": room, "on": on},
                    f"The {room} lights are now {'on' if on else 'off'}.")
        t = pick(rng, [18, 19, 20, 21, 22, 23, 24, 20.5, 21.5, 19.5])
        args = {self.temp: t}
        phrase = f"set the thermostat to {t} °C"
        if rng.random() < 0.5:
            m = pick(rng, ["heat", "cool", "auto"])
            args[self.mode] = m
            phrase += f" in {m} mode"
        return (phrase, args, {"status": "ok", "target": t},
                f"The thermostat is set to {t} °C.")


class Todo(Family):
    topic = "todo"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["add_todo", "create_task", "add_task", "todo_add"])
        self.task = pick(rng, ["task", "title", "item"])
        self.prio = pick(rng, ["priority", "importance"])
        self.tags = pick(rng, ["tags", "labels"])
        self.due = pick(rng, ["due_date", "due", "deadline"])

    def tool(self):
        return _wrap(self.name, "Add an item to the to-do list",
                     {self.task: {"type": "string"},
                      self.prio: {"type": "string", "enum": ["low", "medium", "high"]},
                      self.tags: {"type": "array", "items": {"type": "string"}},
                      self.due: {"type": "string", "description": "YYYY-MM-DD"}},
                     [self.task])

    def call(self, rng):
        task = pick(rng, ["renew passport", "fix the bike", "call the plumber",
                          "write the report", "book a haircut", "pay the rent", "clean the garage",
                          "order printer ink"])
        args = {self.task: task}
        phrase = f"add \"{task}\" to my to-do list"
        if rng.random() < 0.5:
            p = pick(rng, ["low", "medium", "high"])
            args[self.prio] = p
            phrase += f" with {p} priority"
        if rng.random() < 0.4:
            tags = rng.sample(["home", "work", "errands", "finance", "health", "car"],
                              rng.randrange(1, 3))
            args[self.tags] = tags
            phrase += f", tagged {join_and(tags)}"
        if rng.random() < 0.4:
            due = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
            args[self.due] = due
            phrase += f", due {due}"
        tid = rng.randrange(100, 999)
        return (phrase, args, {"status": "added", "id": tid},
                f"Added \"{task}\" to your to-do list (item {tid}).")


class Contacts(Family):
    topic = "contacts"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["update_contact", "edit_contact", "contact_update"])
        self.cid = pick(rng, ["contact_id", "id"])
        self.fields = pick(rng, ["fields", "changes", "updates"])

    def tool(self):
        return _wrap(self.name, "Update fields of a saved contact",
                     {self.cid: {"type": "integer"},
                      self.fields: {"type": "object",
                                    "properties": {"email": {"type": "string"},
                                                   "phone": {"type": "string"}}}},
                     [self.cid, self.fields])

    def call(self, rng):
        cid = rng.randrange(1, 5000)
        f = {}
        if rng.random() < 0.7:
            f["email"] = pick(rng, EMAIL_USERS)
        if not f or rng.random() < 0.5:
            f["phone"] = "+1-555-" + str(rng.randrange(1000, 9999))
        desc = join_and(f"{k} to {v}" for k, v in f.items())
        return (f"update contact {cid}: set {desc}", {self.cid: cid, self.fields: f},
                {"status": "updated", "id": cid}, f"Contact {cid} now has {desc}.")


class Orders(Family):
    ask = True
    topic = "orders"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["get_order_status", "track_order", "order_status", "lookup_order"])
        self.oid = pick(rng, ["order_id", "order_number", "id"])

    def tool(self):
        return _wrap(self.name, "Look up the status of an order",
                     {self.oid: {"type": "string"}}, [self.oid])

    def call(self, rng):
        oid = pick(rng, ["A", "B", "C", "X"]) + str(rng.randrange(10000, 99999))
        st = pick(rng, ["processing", "shipped", "delivered", "out for delivery"])
        res = {"order_id": oid, "status": st}
        ans = f"Order {oid} is {st}"
        if st in ("shipped", "processing"):
            eta = f"2026-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
            res["estimated_delivery"] = eta
            ans += f"; the estimated delivery date is {eta}"
        return f"the status of order {oid}", {self.oid: oid}, res, ans + "."


class Pizza(Family):
    topic = "food"

    def __init__(self, rng):
        super().__init__(rng)
        self.name = pick(rng, ["order_pizza", "pizza_order", "place_food_order"])
        self.size = pick(rng, ["size", "pizza_size"])
        self.tops = pick(rng, ["toppings", "extras"])
        self.qty = pick(rng, ["quantity", "count"])
        self.cheese = pick(rng, ["extra_cheese", "double_cheese"])

    def tool(self):
        return _wrap(self.name, "Order pizza for delivery",
                     {self.size: {"type": "string", "enum": ["small", "medium", "large"]},
                      self.tops: {"type": "array", "items": {"type": "string"}},
                      self.qty: {"type": "integer"}, self.cheese: {"type": "boolean"}},
                     [self.size])

    def call(self, rng):
        size = pick(rng, ["small", "medium", "large"])
        q = rng.randrange(1, 5)
        tops = rng.sample(["mushrooms", "olives", "peppers", "onions", "ham", "basil",
                           "pineapple", "spinach"], rng.randrange(0, 4))
        args = {self.size: size}
        phrase = f"{q} {size} pizza{'s' if q > 1 else ''}"
        if q > 1 or rng.random() < 0.3:
            args[self.qty] = q
        if tops:
            args[self.tops] = tops
            phrase += f" with {join_and(tops)}"
        if rng.random() < 0.3:
            args[self.cheese] = True
            phrase += " and extra cheese"
        total = round(q * {"small": 9, "medium": 12, "large": 15}[size] + 1.5 * len(tops) * q, 2)
        return (f"order {phrase}", args, {"status": "ordered", "total": total,
                                          "eta_minutes": rng.randrange(20, 60)},
                f"Your order of {phrase} is placed; the total is ${total:.2f}.")


FAMILIES = [(Weather, 10), (Forecast, 2), (Currency, 3), (Stock, 2), (Search, 3), (Email, 3),
            (Calendar, 3), (Reminder, 2), (Timer, 2), (Calculator, 2), (Translate, 2),
            (Restaurant, 2), (Flights, 2), (Directions, 2), (Dictionary, 2), (SmartHome, 2),
            (Todo, 2), (Contacts, 1), (Orders, 2), (Pizza, 1)]


# ---------------------------------------------------------------------------------------------
# Conversation assembly

SYSTEM_PROMPTS = ["You are a helpful assistant.", "You are a helpful assistant. Answer concisely.",
                  f"You are {MODEL_NAME}, a small helpful assistant.",
                  "You are a friendly assistant.", "Answer briefly and accurately.",
                  "You are an assistant that can use tools when they help."]


class Knowledge:
    """What the prose sources contribute to chats (train split only)."""

    def __init__(self, definitions=(), quotes=(), verses=(), passages=()):
        self.definitions = list(definitions)
        self.by_source = {}
        for d in self.definitions:
            self.by_source.setdefault(d.source, []).append(d)
        self.quotes = list(quotes)      # (topic, text, ...)
        self.verses = list(verses)      # (reference, text, ...)
        self.passages = list(passages)  # paragraphs of prose


class Generator:
    def __init__(self, seed, knowledge=None, split="train"):
        self.seed = seed
        self.k = knowledge or Knowledge()
        self.split = split

    # ---- single-turn building blocks: each returns (user, reasoning, answer)

    def t_arith(self, rng):
        fn = pick(rng, [f for f, _ in ARITH], [w for _, w in ARITH])
        q, r, a, v = fn(rng)
        return q, r, a, v

    def t_units(self, rng):
        fn = pick(rng, [f for f, _ in UNITS], [w for _, w in UNITS])
        q, r, a, v = fn(rng)
        return q, r, a, v

    def t_word(self, rng):
        q, r, a, v = word_problem(rng)
        return q, r, a, v

    def t_define(self, rng):
        srcs = [s for s in ("wordnet", "jargon", "python-docs", "manpages") if self.k.by_source.get(s)]
        if not srcs:
            return self.t_small(rng)
        src = pick(rng, srcs, [{"wordnet": 6, "jargon": 2, "python-docs": 3, "manpages": 1}[s]
                               for s in srcs])
        d = pick(rng, self.k.by_source[src])
        if src == "wordnet":
            pos = d.extra.get("pos", "")
            q = pick(rng, ["What does \"{w}\" mean?", "Define \"{w}\".", "What is the meaning of "
                           "the word \"{w}\"?", "What does the word {w} mean?", "Define {w}.",
                           "Give me the definition of {w}."]).format(w=d.term)
            senses = d.extra.get("senses", [(d.meaning, [])])
            r = (f"The user asks about the word \"{d.term}\". It is a {pos}; its main sense is: "
                 f"{senses[0][0]}.")
            a = f"\"{cap(d.term)}\" ({pos}): {senses[0][0]}."
            if senses[0][1]:
                a += f" For example: \"{senses[0][1][0]}\"."
                r += " I can add the example sentence."
            if len(senses) > 1:
                a += f" It can also mean: {senses[1][0]}."
                r += " It has another common sense, which I'll mention too."
            return q, r, a, None
        if src == "jargon":
            q = pick(rng, ["In hacker slang, what does \"{w}\" mean?", "What is \"{w}\" in the "
                           "Jargon File?", "What does the jargon term \"{w}\" mean?"]
                     ).format(w=d.term)
            r = f"This is a term from the Jargon File, the hacker dictionary. \"{d.term}\": {d.meaning}"
            a = f"In hacker jargon, \"{d.term}\" means: {d.meaning}"
            return q, r, a, None
        if src == "python-docs":
            kind = d.extra.get("kind", "object")
            shown = d.term + ("()" if kind in ("function", "method", "classmethod",
                                               "staticmethod") else "")
            q = pick(rng, ["What does {o} do in Python?", "What is {o} in Python?",
                           "Explain {o} (Python).", "In Python, what is {o} for?"]).format(o=shown)
            art = "an" if kind[0] in "aeiou" else "a"
            r = (f"{shown} is {art} {kind} in the Python standard library. The documentation "
                 f"describes it as: {d.meaning}")
            a = f"{shown} is a Python {kind}. Its documentation says: {d.meaning}"
            return q, r, a, None
        sec = d.extra.get("section", "3")
        q = pick(rng, ["What does {n}({s}) do?", "What is the {n} function for?",
                       "Describe {n}({s}) briefly."]).format(n=d.term, s=sec)
        r = f"{d.term} is documented in section {sec} of the Linux manual: {d.meaning}."
        a = f"{d.term}({sec}): {d.meaning}."
        return q, r, a, None

    def t_quote(self, rng):
        if self.k.verses and rng.random() < 0.35:
            ref, text = pick(rng, self.k.verses)[:2]
            q = pick(rng, ["Quote {r} from the King James Bible.", "What does {r} say (KJV)?",
                           "Recite {r}.", "What is the text of {r} in the King James Version?"]
                     ).format(r=ref)
            return q, f"The user wants the verse {ref} in the King James Version.", \
                f"{ref} (KJV): \"{text}\"", None
        if not self.k.quotes:
            return self.t_small(rng)
        topic, text = pick(rng, self.k.quotes)[:2]
        topic_word = {"fortunes": "anything", "cookie": "anything", "miscellaneous": "anything",
                      "knghtbrd": "anything", "paradoxum": "paradoxes", "goedel": "logic",
                      "linuxcookie": "Linux", "men-women": "anything", "songs-poems": "poems",
                      "platitudes": "life", "tao": "the Tao", "perl": "Perl"}.get(topic, topic)
        q = pick(rng, ["Give me a quote about {t}.", "Tell me a fortune about {t}.",
                       "Share a saying about {t}.", "Do you know a good quote about {t}?"]
                 ).format(t=topic_word) if topic_word != "anything" else pick(
            rng, ["Tell me a fortune.", "Give me a random quote.", "Say something witty.",
                  "Tell me a fortune cookie saying."])
        return q, "I'll share one from the fortune collection.", text, None

    def t_continue(self, rng):
        if not self.k.passages:
            return self.t_small(rng)
        para = pick(rng, self.k.passages)
        sents = [s for s in _sentences(para) if s]
        if len(sents) < 3:
            return self.t_small(rng)
        k = rng.randrange(1, min(3, len(sents) - 1) + 1)
        head, tail = " ".join(sents[:k]), " ".join(sents[k:k + 2])
        if rng.random() < 0.7:
            q = pick(rng, ["Continue this text: {h}", "Continue: {h}",
                           "What comes next? {h}", "Keep going: {h}"]).format(h=head)
            return q, "I'll continue the text in the same style.", tail, None
        q = pick(rng, ["Repeat after me: {h}", "Say exactly this: {h}", "Echo: {h}"]).format(h=head)
        return q, "The user wants the text repeated exactly.", head, None

    def t_small(self, rng):
        pairs = [
            (["Hello!", "Hi!", "Hey there.", "Good morning!", "Hi, how are you?"],
             "The user greets me; I'll greet back and offer help.",
             ["Hello! How can I help you today?", "Hi! What can I do for you?",
              "Hello! I'm doing well. How can I help?"]),
            (["Who are you?", "What are you?", "Tell me about yourself.", "What is your name?"],
             "The user asks who I am.",
             [f"I'm {MODEL_NAME}, a small language model with the DeepSeek-V4 architecture, "
              "trained from scratch on public-domain and permissively licensed text. I can chat, "
              "do arithmetic, convert units, define words and call tools.",
              f"My name is {MODEL_NAME}. I'm a very small DeepSeek-V4-style model, so keep "
              "questions simple: arithmetic, unit conversions, definitions and tool calls work "
              "best."]),
            (["What can you do?", "How can you help me?", "What are you good at?"],
             "The user asks what I can do.",
             ["I can answer simple questions, do arithmetic step by step, convert units, define "
              "words, quote fortunes and Bible verses, and call tools such as weather lookups "
              "when you provide them.", "I can do arithmetic, convert units, explain words and "
              "use tools like a weather service if you give me one."]),
            (["Thanks!", "Thank you.", "Thanks a lot!", "Great, thank you!"],
             "The user thanks me.",
             ["You're welcome!", "Glad I could help!", "You're welcome. Anything else?"]),
            (["Goodbye!", "Bye.", "See you later!"], "The user says goodbye.",
             ["Goodbye! Have a nice day.", "Bye! Come back any time."]),
        ]
        qs, r, answers = pick(rng, pairs)
        return pick(rng, qs), r, pick(rng, answers), None

    SINGLE = ["arith", "units", "word", "define", "quote", "continue", "small"]
    SINGLE_W = [5, 3, 2, 4, 2, 1, 1]

    def single(self, rng, kind=None):
        kind = kind or pick(rng, self.SINGLE, self.SINGLE_W)
        return kind, getattr(self, "t_" + kind)(rng)

    # ---- whole conversations

    def conversation(self, index):
        rng = random.Random(f"dsv4-mini-chat:{self.seed}:{self.split}:{index}")
        kind = pick(rng, [k for k, _ in KIND_WEIGHTS], [w for _, w in KIND_WEIGHTS])
        thinking = rng.random() < 0.5
        conv = getattr(self, "c_" + kind)(rng, thinking)
        conv["thinking"] = thinking
        return kind, conv

    def _system(self, rng, p=0.4, tools=False):
        msgs = []
        if rng.random() < p:
            msgs.append({"role": "system", "content": pick(rng, SYSTEM_PROMPTS)})
        return msgs

    def _assistant(self, thinking, reasoning, content):
        m = {"role": "assistant", "content": content}
        if thinking:
            m["reasoning_content"] = reasoning
        return m

    def c_single(self, rng, thinking, kind=None):
        msgs = self._system(rng)
        kind, (q, r, a, _) = self.single(rng, kind)
        if not thinking and kind in ("arith", "units", "word") and rng.random() < 0.5:
            a = r + " " + a  # chat mode sometimes shows its working in the answer
        msgs += [{"role": "user", "content": q}, self._assistant(thinking, r, a)]
        return {"messages": msgs}

    def c_arith(self, rng, thinking):
        return self.c_single(rng, thinking, "arith")

    def c_units(self, rng, thinking):
        return self.c_single(rng, thinking, "units")

    def c_word(self, rng, thinking):
        return self.c_single(rng, thinking, "word")

    def c_define(self, rng, thinking):
        return self.c_single(rng, thinking, "define")

    def c_quote(self, rng, thinking):
        return self.c_single(rng, thinking, pick(rng, ["quote", "continue"]))

    def c_small(self, rng, thinking):
        return self.c_single(rng, thinking, "small")

    def c_multi(self, rng, thinking):
        msgs = self._system(rng)
        turns = rng.randrange(2, 4)
        last_value = None
        for t in range(turns):
            if t > 0 and last_value is not None and rng.random() < 0.5:
                q, r, a, last_value = _followup(rng, last_value)
            else:
                kind, (q, r, a, v) = self.single(rng)
                last_value = v if kind == "arith" and isinstance(v, int) else None
            msgs += [{"role": "user", "content": q}, self._assistant(thinking, r, a)]
        return {"messages": msgs}

    def _tools(self, rng, families, n_distractors):
        """Instantiated families (the needed ones first) and the shuffled tool list."""
        needed = [f(rng) if f not in (Search, Dictionary) else f(rng, self.k.definitions)
                  for f in families]
        topics = {f.topic for f in needed}
        names = {f.name for f in needed}
        others = []
        pool = [f for f, _ in FAMILIES if f not in families]
        rng.shuffle(pool)
        for f in pool:
            if len(others) >= n_distractors:
                break
            inst = f(rng) if f not in (Search, Dictionary) else f(rng, self.k.definitions)
            if inst.topic in topics or inst.name in names:
                continue
            topics.add(inst.topic)
            names.add(inst.name)
            others.append(inst)
        tools = [f.tool() for f in needed + others]
        rng.shuffle(tools)
        return needed, others, tools

    def c_tool(self, rng, thinking, family=None):
        fams = [f for f, _ in FAMILIES]
        wts = [w for _, w in FAMILIES]
        first = family or pick(rng, fams, wts)
        mode = pick(rng, ["one", "same", "mixed"], [6, 3, 1])
        families = [first]
        if mode == "mixed":
            second = pick(rng, [f for f in fams if f is not first])
            families.append(second)
        needed, others, tools = self._tools(rng, families, rng.randrange(0, 4))
        calls = []  # (family, phrase, args, result, answer)
        if mode == "same":
            n = pick(rng, [2, 2, 3])
            seen = set()
            for _ in range(n * 3):  # distinct requests only
                c = (needed[0],) + needed[0].call(rng)
                if c[1] not in seen and len(calls) < n:
                    seen.add(c[1])
                    calls.append(c)
        else:
            for f in needed:
                calls.append((f,) + f.call(rng))
        msgs = self._system(rng, 0.5)
        user = _request(rng, calls)
        msgs.append({"role": "user", "content": user})
        self._tool_round(rng, thinking, msgs, calls)
        # Sometimes a follow-up: another call of a needed family, or a question needing none.
        if rng.random() < 0.25:
            if rng.random() < 0.6:
                f = pick(rng, needed)
                c = (f,) + f.call(rng)
                msgs.append({"role": "user", "content": _followup_request(rng, f, c[1])})
                self._tool_round(rng, thinking, msgs, [c])
            else:
                _, (q, r, a, _) = self.single(rng, pick(rng, ["arith", "small", "define"]))
                msgs.append({"role": "user", "content": q})
                msgs.append(self._assistant(thinking, "No tool is needed for this. " + r, a))
        return {"messages": msgs, "tools": tools}

    def _tool_round(self, rng, thinking, msgs, calls):
        tool_calls, reasons = [], []
        for f, phrase, args, result, answer in calls:
            tool_calls.append({"id": _call_id(rng), "type": "function",
                               "function": {"name": f.name,
                                            "arguments": json.dumps(args, ensure_ascii=False)}})
            reasons.append(f.thought(args))
        asks = [c[1] for c in calls if c[0].ask]
        dos = [c[1] for c in calls if not c[0].ask]
        wants = ([f"to know {join_and(asks)}"] if asks else []) + \
            ([f"me to {join_and(dos)}"] if dos else [])
        r = f"The user wants {' and '.join(wants)}. " + " ".join(dict.fromkeys(reasons))
        if len(calls) > 1:
            r += f" I'll make all {len(calls)} calls at once."
        m = {"role": "assistant", "content": None, "tool_calls": tool_calls}
        if thinking:
            m["reasoning_content"] = r
        msgs.append(m)
        for tc, (f, phrase, args, result, answer) in zip(tool_calls, calls):
            msgs.append({"role": "tool", "tool_call_id": tc["id"],
                         "content": json.dumps(result, ensure_ascii=False)})
        final = " ".join(c[4] for c in calls)
        r2 = " ".join(f"{c[0].name} returned {_summary(c[3])}." for c in calls)
        r2 += " I'll answer from " + ("these results." if len(calls) > 1 else "that.")
        msgs.append(self._assistant(thinking, r2, final))

    def c_weather(self, rng, thinking):
        return self.c_tool(rng, thinking, Weather)

    def c_tool_none(self, rng, thinking):
        """Tools are offered but none fits the question: answer directly."""
        _, _, tools = self._tools(rng, [], rng.randrange(1, 4))
        # No tool may fit: arithmetic only without a calculator, definitions only without a
        # dictionary or search tool; unit conversions, small talk and quotes never have one.
        kinds = ["arith", "units", "small", "quote"]
        names = {t["function"]["name"] for t in tools}
        if any(n in names for n in ("calculator", "calculate", "evaluate_expression", "math_eval")):
            kinds = ["small", "quote"]
        if not any(n in names for n in ("define_word", "lookup_word", "dictionary_lookup",
                                        "get_definition", "search_web", "web_search", "search",
                                        "internet_search", "find_pages")):
            kinds.append("define")
        _, (q, r, a, _) = self.single(rng, pick(rng, kinds))
        msgs = self._system(rng, 0.5)
        msgs.append({"role": "user", "content": q})
        msgs.append(self._assistant(thinking, "None of the tools is needed here. " + r, a))
        return {"messages": msgs, "tools": tools}


def _sentences(para):
    return re.split(r"(?<=[.!?])\s+(?=[A-Z\"'(])", para.strip())


def _followup(rng, prev):
    """A follow-up on the previous integer answer: (question, reasoning, answer, value)."""
    op = pick(rng, ["times", "plus", "minus", "double", "half"])
    if op == "double":
        v = prev * 2
        return ("Now double that.", f"The previous result was {fmt_int(prev)}. "
                f"{fmt_int(prev)} × 2 = {fmt_int(v)}.", f"Doubled, it is {fmt_int(v)}.", v)
    if op == "half":
        v = Fraction(prev, 2)
        return ("And half of that?", f"The previous result was {fmt_int(prev)}. "
                f"{fmt_int(prev)} / 2 = {fmt_num(v)}.", f"Half of it is {fmt_num(v)}.",
                v.numerator if v.denominator == 1 else None)
    n = rng.randrange(2, 50)
    if op == "times":
        v = prev * n
        sym = "×"
    elif op == "plus":
        v = prev + n
        sym = "+"
    else:
        v = prev - n
        sym = "-"
    q = pick(rng, [f"And what is that {op} {n}?", f"Now {op} {n}?", f"What if I take that {op} {n}?"])
    return (q, f"The previous result was {fmt_int(prev)}. {fmt_int(prev)} {sym} {n} = {fmt_int(v)}.",
            f"{fmt_int(prev)} {sym} {n} = {fmt_int(v)}.", v)


def _request(rng, calls):
    """The user message asking for the calls' phrases: questions, requests, or both."""
    asks = [c[1] for c in calls if c[0].ask]
    dos = [c[1] for c in calls if not c[0].ask]
    parts = []
    if asks:
        parts.append(pick(rng, ["What is {w}?", "What's {w}?", "Can you tell me {w}?",
                                "Tell me {w}.", "I'd like to know {w}.", "Check {w}, please."],
                          [4, 2, 1, 1, 1, 1]).format(w=join_and(asks)))
    if dos:
        w = join_and(dos)
        if parts:
            parts.append(pick(rng, ["Also, please {w}.", "And {w}.", "Then {w}, please."]).format(w=w))
        else:
            parts.append(cap(pick(rng, ["{w}.", "Please {w}.", "Can you {w}?", "{w}, please.",
                                        "I need you to {w}."]).format(w=w)))
    return " ".join(parts)


def _followup_request(rng, family, phrase):
    if family.ask:
        return pick(rng, ["And {p}?", "What about {p}?", "And what is {p}?"]).format(p=phrase)
    return pick(rng, ["Now {p}.", "Also {p}, please.", "Please {p} too.", "Can you also {p}?"]
                ).format(p=phrase)


# Conversation kinds and their weights (the weather kind on top of the weather share of
# c_tool: the end-to-end test asks for the weather with a get_weather tool).
KIND_WEIGHTS = [("arith", 14), ("units", 8), ("word", 4), ("define", 10), ("quote", 5),
                ("small", 4), ("multi", 9), ("tool", 26), ("weather", 14), ("tool_none", 6)]


def generate(seed, count, knowledge=None, split="train", start=0):
    """Yields (kind, conversation) for conversations start .. start+count-1."""
    gen = Generator(seed, knowledge, split)
    for i in range(start, start + count):
        yield gen.conversation(i)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--count", type=int, default=100)
    p.add_argument("--split", default="train")
    args = p.parse_args(argv)
    for _, conv in generate(args.seed, args.count, None, args.split):
        sys.stdout.write(json.dumps(conv, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
