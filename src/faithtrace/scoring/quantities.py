"""Numbers compared by value, not by spelling: "10,000" = "10000" = "10 000", "5 %" = "5 percent".

Both the lexical check and the proof of support tokenise through ``normalise``: a claim that writes a number
differently from its document must neither look ungrounded (a false alarm on a faithful answer) nor, when
the value differs, look grounded. Number words and common unit spellings are folded too, where it is cheap
and unambiguous ("twelve" = "12", "km" = "kilometres", "hrs" = "hours").
"""

from __future__ import annotations

import re

# Digit groups written with spaces or thin spaces ("10 000", "1 250 000"): one number. Only groups of
# exactly three digits after the first are joined, so "in 2019 100 people" is not read as 2019100.
_SPACED_GROUPS = re.compile(r"(?<![\d.,])(\d{1,3})((?:[ \u00a0\u202f]\d{3})+)(?![\d,]|\.\d|\s?\d)")
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")
_PERCENT = re.compile(r"\s*(?:%|\bper\s?cent\b|\bpct\b)", re.IGNORECASE)
# "5 m" is metres more often than millions: "m" is not a scale here.
_SCALE = re.compile(r"\b(\d+(?:\.\d+)?)\s*(thousand|million|billion|trillion|k|bn)\b", re.IGNORECASE)
_SCALES = {"thousand": 10**3, "k": 10**3, "million": 10**6, "billion": 10**9, "bn": 10**9, "trillion": 10**12}
# "one" stays a word: "one of the options" states no quantity, and the lexical check would miss it.
NUMBER_WORDS = {
    "zero": "0", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
    "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18",
    "nineteen": "19", "twenty": "20", "thirty": "30", "forty": "40", "fifty": "50", "sixty": "60",
    "seventy": "70", "eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000",
    "half": "0.5", "twice": "2", "dozen": "12",
}  # fmt: skip
# Unit spellings, folded to one word. Abbreviations only right after a number ("4 h", "5km"): alone, "h" or
# "l" is more often something else.
UNITS = {
    "km": "kilometre", "kms": "kilometre", "kilometer": "kilometre", "kilometers": "kilometre",
    "kilometres": "kilometre", "mi": "mile", "miles": "mile", "kg": "kilogram", "kgs": "kilogram",
    "kilograms": "kilogram", "kilo": "kilogram", "kilos": "kilogram", "g": "gram", "grams": "gram",
    "lb": "pound", "lbs": "pound", "pounds": "pound", "hr": "hour", "hrs": "hour", "hours": "hour",
    "h": "hour", "min": "minute", "mins": "minute", "minutes": "minute", "sec": "second",
    "secs": "second", "seconds": "second", "yr": "year", "yrs": "year", "years": "year",
    "days": "day", "weeks": "week", "wk": "week", "months": "month", "mo": "month", "m2": "square metre",
    "cm": "centimetre", "centimeters": "centimetre", "centimetres": "centimetre", "mm": "millimetre",
    "ml": "millilitre", "l": "litre", "liter": "litre", "liters": "litre", "litres": "litre",
    "gb": "gigabyte", "gigabytes": "gigabyte", "mb": "megabyte", "megabytes": "megabyte",
    "usd": "dollar", "dollars": "dollar", "$": "dollar", "eur": "euro", "euros": "euro", "€": "euro",
    "percent": "percent",
}  # fmt: skip
_ABBREVIATED = re.compile(
    r"(?<=\d)\s*("
    + "|".join(sorted((k for k in UNITS if len(k) < 3 and k.isalpha()), key=len, reverse=True))
    + r"|hrs|min|mins|sec|secs|kms|kgs|lbs|yrs)\b",
    re.IGNORECASE,
)
_CURRENCY_FIRST = re.compile(r"([$€£])\s?(\d[\d,.]*)")
_CURRENCY_NAMES = {"$": "dollar", "€": "euro", "£": "pound"}


def _scaled(m: re.Match[str]) -> str:
    value = float(m.group(1)) * _SCALES[m.group(2).lower()]
    return f"{value:.0f}" if value.is_integer() else f"{value:g}"


def normalise(text: str) -> str:
    """``text`` with numbers written one way: digits, no grouping, "percent" as a word, scales applied."""
    text = _SPACED_GROUPS.sub(lambda m: m.group(1) + re.sub(r"\D", "", m.group(2)), text)
    text = _THOUSANDS_COMMA.sub("", text)
    text = _CURRENCY_FIRST.sub(lambda m: f"{m.group(2)} {_CURRENCY_NAMES[m.group(1)]}", text)
    text = _PERCENT.sub(" percent", text)
    text = _ABBREVIATED.sub(lambda m: " " + UNITS[m.group(1).lower()], text)
    return _SCALE.sub(_scaled, text)


def word(token: str) -> str:
    """A lower-case word token in its canonical form: number words as digits, unit spellings folded."""
    token = NUMBER_WORDS.get(token, token)
    if len(token) >= 3 and not token[0].isdigit():
        token = UNITS.get(token, token)
    return token


def canonical_number(token: str) -> str:
    """One spelling per value: "1,000" -> "1000", "4.0" -> "4", "4.50" -> "4.5"."""
    token = token.replace(",", "")
    if "." in token:
        token = token.rstrip("0").rstrip(".") or "0"
    return token
