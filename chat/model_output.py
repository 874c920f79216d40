"""A chat model's text made fit to show: chat-template special tokens and our own prompt markup
removed as it streams, echoed prompt text removed when it is done.

Small models and servers whose chat template does not match the model leak the template's
markup (`<|im_start|>`, `</|im_end|>`, `<｜User｜>`, `<end_of_turn>`, `[INST]`, `<<SYS>>`) and
run on into a turn of their own. A token that starts or ends a turn ends the answer (what
follows is the model talking to itself), except at the very start, where it is skipped with
the role name after it; an echoed `<<SYS>> … <</SYS>>` or `<think> … </think>` block is dropped
whole. Tokens are matched by form, not by name, and wherever they are: no document is about
them, and a leaked turn is worse than a lost quotation.

Some servers' templates HTML-escape the prompt (llama-cpp-python with Gemma 3), so the model
copies `&lt;source id=&quot;5&quot; …&gt;` and `it&#x27;s`. Entities are unescaped first, then
the fences we put around sources, memories and summaries (`<source id="5" file="…" page="…">`,
`</source>`, `<memory>`, `<summary>`) are removed. Inside a Markdown code span or fence neither
happens: there an entity or a tag is what the model quotes (HTML's own `<source src=…>`, a
LaTeX listing), and Markdown shows it as written. Outside code, unescaping changes nothing a
reader sees (Markdown decodes entities there, and shows raw HTML as text), but lets the filter,
the echo check and the verification of quotes see the text as the reader does.
"""

from __future__ import annotations

import html
import re
import unicodedata

_SPECIAL = re.compile(
    # ChatML, Llama 3, Phi, Granite, DeepSeek (full-width bars), opening or closing:
    # <|im_start|>, </|im_end|>, <|eot_id|>, <|end|>, <｜end▁of▁sentence｜>
    r"</?[|｜][^\s<>|｜]{1,40}[|｜]>"
    r"|</?(?:start|end)_of_[a-z_]{2,16}>"  # Gemma: <start_of_turn>, <end_of_turn>
    r"|<(?:bos|eos|eot|unk|pad|mask)>|</?s>"  # sequence markers
    r"|\[/?(?:INST|[A-Z]+(?:_[A-Z]+)+)\]"  # Llama 2, Mistral: [INST], [/INST], [TOOL_CALLS]
    r"|<</?SYS>>"
    r"|</?think>"  # a reasoning model's thoughts
)
# Tokens that, before any text, only open the model's own turn.
_OPENERS = re.compile(
    r"<[|｜](?:im_start|start_header_id|end_header_id|assistant|begin[_▁]of[_▁](?:text|sentence)"
    r"|start_of_role|end_of_role)[|｜]>|<start_of_turn>|<s>|<bos>|\[/INST\]",
    re.IGNORECASE,
)
_NOISE = frozenset({"<unk>", "<pad>", "<mask>"})  # removed wherever they are, nothing more
_ROLE = re.compile(r"^\s*(?:assistant|model)\b[:\s]*", re.IGNORECASE)
_ROLES = ("assistant", "model")
_ROLE_LINES = frozenset({"user", "assistant", "model", "system", "user:", "assistant:", "model:"})
_PARTIAL = re.compile(r"(?:<<?/?|\[/?)[^\s<>\[\]]{0,40}>?$")  # a special token may be arriving

# --- Entities and our own markup, outside code

_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_RAW_TAIL = re.compile(r"&[#A-Za-z0-9]{0,31}$|`+$")  # may still grow: wait for more
_OURS = re.compile(
    r"""<source\s+id\s*=\s*["']?\d+["']?[^<>\n]{0,300}?/?>|</source\s*>"""
    r"|</?memory\s*>|</?summary\s*>"
)
_FENCE_NAMES = ("source", "memory", "summary")
_OURS_TAIL = re.compile(
    r"<(?:/|/?(?:"
    + "|".join(re.escape(name[:i]) for name in _FENCE_NAMES for i in range(len(name), 0, -1))
    + r")\s*|source\s[^<>\n]{0,300})?$"
)


class _Decoder:
    """Entities unescaped and our fences removed, outside Markdown code (a span or fence opened
    by a run of backticks lasts until a run as long)."""

    def __init__(self) -> None:
        self.raw = ""  # not decoded yet: may end in a partial entity or a backtick run
        self.held = ""  # decoded, outside code: may be the start of one of our fences
        self.code = 0  # length of the backtick run that opened the code we are in; 0: none
        self.removed = 0

    def feed(self, text: str, *, final: bool = False) -> str:
        self.raw += text
        cut = len(self.raw)
        if not final and (tail := _RAW_TAIL.search(self.raw)):
            cut = tail.start()
        ready, self.raw = self.raw[:cut], self.raw[cut:]
        out: list[str] = []
        for piece in re.split(r"(`+)", ready):
            if not piece:
                continue
            if piece[0] == "`":
                out.append(self.held)
                self.held = ""
                if not self.code:
                    self.code = len(piece)
                elif len(piece) == self.code:
                    self.code = 0
                out.append(piece)
            elif self.code:
                out.append(piece)
            else:
                out.append(self._outside(_ENTITY.sub(lambda m: html.unescape(m.group()), piece)))
        if final:
            out.append(self.held)
            self.held = ""
        return "".join(out)

    def _outside(self, text: str) -> str:
        text, removed = _OURS.subn("", self.held + text)
        self.removed += removed
        tail = _OURS_TAIL.search(text)
        cut = tail.start() if tail else len(text)
        self.held = text[cut:]
        return text[:cut]


class TemplateFilter:
    """Feed streamed text in, get back what may be shown; `flush()` at the end of the turn."""

    def __init__(self) -> None:
        self.pending = ""
        self.shown = False  # visible text has gone out
        self.stopped = False  # a turn boundary: the rest is dropped
        self.in_system = False  # inside an echoed <<SYS>> block
        self.in_thoughts = False  # inside a <think> block
        self.skip_role = False  # a turn opener was skipped: drop the role name after it
        self.tokens = 0  # special tokens taken out
        self.decoder = _Decoder()

    @property
    def removed(self) -> int:
        """Special tokens and fences of ours taken out (for logs and tests)."""
        return self.tokens + self.decoder.removed

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += self.decoder.feed(text)
        return self._filter()

    def _filter(self) -> str:
        out: list[str] = []
        while self.pending and not self.stopped:
            match = _SPECIAL.search(self.pending)
            if match is None:
                partial = _PARTIAL.search(self.pending)
                cut = partial.start() if partial else len(self.pending)
                if not self._role_may_follow(self.pending[:cut]):
                    out.append(self._visible(self.pending[:cut]))
                    self.pending = self.pending[cut:]
                break
            out.append(self._visible(self.pending[: match.start()]))
            self.pending = self.pending[match.end() :]
            self._token(match.group(0))
        return "".join(out)

    def flush(self) -> str:
        if self.stopped:
            return ""
        self.pending += self.decoder.feed("", final=True)
        shown = self._filter()
        rest, self.pending = self.pending, ""
        return shown + ("" if self.stopped else self._visible(rest))

    def _token(self, special: str) -> None:
        self.tokens += 1
        if special == "<<SYS>>":
            self.in_system = True
        elif special == "<</SYS>>":
            self.in_system = False
        elif special == "<think>":
            self.in_thoughts = True
        elif special == "</think>":
            self.in_thoughts = False
        elif special in _NOISE:
            pass
        elif not self.shown and _OPENERS.fullmatch(special):
            self.skip_role = True
        elif not self.shown and special in ("</s>", "<eos>"):
            pass
        else:
            self.stopped = True

    def _role_may_follow(self, text: str) -> bool:
        """After a skipped turn opener, whether `text` may be the start of a role name (wait
        for more before showing it)."""
        stripped = text.lstrip()
        return (
            self.skip_role
            and not (self.in_system or self.in_thoughts)
            and len(stripped) < 10
            and any(r.startswith(stripped.lower()) for r in _ROLES)
        )

    def _visible(self, text: str) -> str:
        if self.in_system or self.in_thoughts or not text:
            return ""
        if self.skip_role:
            text = _ROLE.sub("", text, count=1)
            self.skip_role = False
        if not self.shown:
            text = text.lstrip()
        if text:
            self.shown = True
        return text


def strip_special_tokens(text: str) -> str:
    """The whole text through a TemplateFilter."""
    cleaner = TemplateFilter()
    return cleaner.feed(text) + cleaner.flush()


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


ECHO_WORDS = 6  # a run of this many words of the prompt, in order, is an echo, not a chance


def _words(text: str) -> list[str]:
    """Words as compared for echoes: entities decoded, compatibility forms folded, case,
    quotes, punctuation and line wrapping ignored."""
    plain = unicodedata.normalize("NFKC", html.unescape(text)).casefold()
    return re.findall(r"\w+", plain)


def _echoed(segments: list[str], prompt: str) -> list[bool]:
    """Which segments are mostly (three quarters of their words) runs of ECHO_WORDS or more
    words of `prompt`. Runs are found across segments, so a rule the model wrapped at another
    place, or a short line that ends one, is caught with the rest of it."""
    said = _words(prompt)
    runs = {tuple(said[i : i + ECHO_WORDS]) for i in range(len(said) - ECHO_WORDS + 1)}
    owner: list[int] = []
    words: list[str] = []
    for n, segment in enumerate(segments):
        found = _words(segment)
        words += found
        owner += [n] * len(found)
    covered = [False] * len(words)
    for i in range(len(words) - ECHO_WORDS + 1):
        if tuple(words[i : i + ECHO_WORDS]) in runs:
            covered[i : i + ECHO_WORDS] = [True] * ECHO_WORDS
    total = [0] * len(segments)
    echoed = [0] * len(segments)
    for n, hit in zip(owner, covered, strict=True):
        total[n] += 1
        echoed[n] += hit
    return [bool(t) and echoed[n] * 4 >= t * 3 for n, t in enumerate(total)]


def remove_echoes(answer: str, *, prompt: str, question: str) -> str:
    """`answer` without what it copied from our prompt (rules, instructions: whole lines, and
    sentences mostly made of runs of the prompt's words, however escaped, quoted or wrapped)
    and without the question repeated at its start. Lines under 20 characters are only removed
    within a longer echo: short phrases may coincide with the prompt honestly."""
    prompt_lines = {_norm(line) for line in prompt.splitlines() if len(_norm(line)) >= 20}
    lines = [
        line
        for line in answer.splitlines()
        if not (len(_norm(line)) >= 20 and _norm(line) in prompt_lines)
    ]
    # Sentences and lines, each followed by the space or line break that ended it.
    parts = re.split(r"(\n+|(?<=[.!?;:])[ \t]+)", "\n".join(lines))
    segments, breaks = parts[::2], [*parts[1::2], ""]
    echoed = _echoed(segments, prompt)
    text = "".join(
        segment + gap
        for segment, gap, echo in zip(segments, breaks, echoed, strict=True)
        if not echo
    )
    kept = text.split("\n")
    # A bare role name on the first line is template residue ("user", "model"), not an answer.
    while kept and (not kept[0].strip() or _norm(kept[0]) in _ROLE_LINES):
        kept.pop(0)
    text = "\n".join(kept).strip()
    asked = _norm(question)
    if asked and _norm(text).startswith(asked):
        # Drop the echoed question (whatever whitespace it had) and any "Question:" label.
        words = len(question.split())
        parts = text.split(None, words)
        text = parts[words] if len(parts) > words else ""
    return re.sub(r"\n{3,}", "\n\n", text).strip()
