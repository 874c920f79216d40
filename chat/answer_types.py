"""What kind of answer a question asks for, and whether a sentence holds one.

"How many…", "which version…" and "how often…" are answered by a number; "how do I…" by
something the reader can type (a function, a command, an option, a package); "who…" and "what
is it called" by a name. Question-answering systems have weighed sentences by the
answer type the question expects since the TREC QA track. The offline answerer gives a small
bonus (`ANSWER_TYPE_BONUS`, chat.grounding) to a sentence that holds such an answer *that the
question does not already contain*: of two sentences about the question, the one that answers
it comes first ("…about 1 in 20 such matrices is singular" over "This amounts to finding the
probability distribution of the determinant…").

The question words are those of the languages the app indexes (English, German, Norwegian,
Chinese); a question in none of them expects nothing and no sentence gets the bonus.
"""

from __future__ import annotations

import re

from notebook.language import detect_language
from notebook.textutil import cjk_ratio

NUMBER, CODE, NAME = "number", "code", "name"

_NUMBER_QUESTION = re.compile(
    r"\bhow (?:many|much|large|long|big|often|fast|far|old|small|wide|high|tall|deep)\b"
    r"|\bwhat (?:percentage|proportion|fraction|share|year|version|number|ratio|value)\b"
    r"|\bwhich (?:version|year|value)\b|\bup to which\b|\bwhat (?:point )?size\b"
    r"|\bwie (?:viele?|groß|lange?|oft|hoch|schnell|weit|alt|klein|breit)\b"
    r"|\bwieviele?\b|\bwelche[rsnm]? (?:Version|Jahr|Größe|Anzahl|Wert)\w*\b"
    r"|\bhvor (?:mange|mye|stor|store|lang|lenge|ofte|fort|gammel)\b|\bhvilken versjon\b"
    r"|多少|几[个种次倍页年]|多大|多长|多久|版本号|百分之",
    re.IGNORECASE,
)
# Asking how to do something: the answer is what to type. (Asking "which function" or "which
# option" was tried too: in manuals the sentences around such a question hold code anyway, and
# the bonus picked the wrong one as often as the right one; docs/chat.md.)
_CODE_QUESTION = re.compile(
    r"\bhow (?:do|can|could|should|would|must) (?:i|you|we|one)\b|\bhow to\b"
    r"|\bwie (?:kann|muss|soll|könnte) (?:ich|man)\b|\bhvordan\b|怎样|怎么|如何",
    re.IGNORECASE,
)
_NAME_QUESTION = re.compile(
    r"\bwho\b|\bwhat is (?:it|this|that) called\b|\bwhat (?:are|is) \w+ called\b"
    r"|\bwer\b|\bwie (?:heißt|heißen)\b|\bhvem\b|\bhva heter\b|谁|叫什么",
    re.IGNORECASE,
)

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_CODE = re.compile(
    r"\\[A-Za-z@]+"  # a TeX command: \usepackage, \urldef
    r"|\b[A-Za-z]\w*(?:\.[A-Za-z_]\w+)+"  # a dotted name: read.fwf, is.nan, natbib.cfg
    r"|\b\w+\("  # a call: paste(
    r"|\b\w+_\w+"  # snake_case: write_csv, INT_MIN
    r"|\b\w+::\w+"  # pkg::fn
    r"|[\w.-]+=[\w.'\"-]+"  # key=value: margin=1.25in, sep=""
    r"|\b\w+&\w+"  # an option such as sort&compress
    r"|\b[a-z]+\d+[a-z\d]*\b"  # readstata13, utf8, x11
    r"|\{[A-Za-z][\w-]*\}"  # {geometry}
    r"|\b[a-z]+[A-Z]\w*|\b[A-Z][a-z]+[A-Z]\w*"  # camelCase, CamelCase: readBin, MusicXML
    r"|(?<![\w-])--?[a-z][\w-]+"  # a command-line flag: --vanilla
)
_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z-]{2,}")
_NAME = re.compile(r"(?<=\s)[A-Z][a-z]+(?:[ -][A-Z][a-z]+)*")


def expected(question: str) -> str:
    """The kind of answer `question` asks for: NUMBER, CODE, NAME, or "" (no telling)."""
    if _NUMBER_QUESTION.search(question):
        return NUMBER
    if _NAME_QUESTION.search(question):
        return NAME
    if _CODE_QUESTION.search(question):
        return CODE
    return ""


def _fold(text: str) -> str:
    """Letters and digits only, lower-cased: how an answer is compared with the question."""
    return re.sub(r"\W+", "", text).lower()


def holds(sentence: str, kind: str, question: str) -> bool:
    """Whether `sentence` holds an answer of `kind` that `question` does not contain."""
    if not kind:
        return False
    asked = _fold(question)
    if kind == NUMBER:  # a number the question gives ("2x2" gives none) is not an answer
        given = set(_NUMBER.findall(question))
        return any(number not in given for number in _NUMBER.findall(sentence))
    found = _CODE.findall(sentence)
    if cjk_ratio(sentence) > 0.1:  # a Latin word inside Chinese text names something
        found += _LATIN_WORD.findall(sentence)
    # German capitalises every noun: only code tells a name there.
    if kind == NAME and cjk_ratio(sentence) <= 0.1 and detect_language(sentence) != "de":
        found += _NAME.findall(sentence)
    return any(_fold(item) and _fold(item) not in asked for item in found)
