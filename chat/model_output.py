"""A chat model's text made fit to show: chat-template special tokens removed as it streams,
echoed prompt text removed when it is done.

Small models and servers whose chat template does not match the model leak the template's
markup (`<|im_start|>`, `<end_of_turn>`, `[INST]`, `<<SYS>>`) and run on into a turn of their
own. A token that starts or ends a turn ends the answer (what follows is the model talking to
itself), except at the very start, where it is skipped with the role name after it; an echoed
`<<SYS>> … <</SYS>>` block is dropped whole.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(
    r"<\|[A-Za-z_]{1,24}\|>"  # ChatML, Llama 3, Phi: <|im_start|>, <|eot_id|>, <|user|>
    r"|<(?:start|end)_of_turn>"  # Gemma
    r"|\[/?INST\]"  # Llama 2, Mistral
    r"|<</?SYS>>"
    r"|</?s>|<unk>|<pad>"
)
# Tokens that, before any text, only open the model's own turn.
_OPENERS = re.compile(
    r"<\|im_start\|>|<start_of_turn>|<\|start_header_id\|>|<\|end_header_id\|>|<\|assistant\|>"
    r"|<s>|\[/INST\]|<\|begin_of_text\|>"
)
_ROLE = re.compile(r"^\s*(?:assistant|model)\b[:\s]*", re.IGNORECASE)
_ROLES = ("assistant", "model")
_ROLE_LINES = frozenset({"user", "assistant", "model", "system", "user:", "assistant:", "model:"})
_PARTIAL = re.compile(r"(?:<<?/?|\[/?)[^\s<>\[\]]{0,24}>?$")  # a special token may be arriving


class TemplateFilter:
    """Feed streamed text in, get back what may be shown; `flush()` at the end of the turn."""

    def __init__(self) -> None:
        self.pending = ""
        self.shown = False  # visible text has gone out
        self.stopped = False  # a turn boundary: the rest is dropped
        self.in_system = False  # inside an echoed <<SYS>> block
        self.skip_role = False  # a turn opener was skipped: drop the role name after it
        self.removed = 0  # special tokens taken out (for logs and tests)

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        self.pending += text
        out: list[str] = []
        while self.pending and not self.stopped:
            match = _SPECIAL.search(self.pending)
            if match is None:
                partial = _PARTIAL.search(self.pending)
                cut = partial.start() if partial else len(self.pending)
                out.append(self._visible(self.pending[:cut]))
                self.pending = self.pending[cut:]
                break
            out.append(self._visible(self.pending[: match.start()]))
            self.pending = self.pending[match.end() :]
            self._token(match.group(0))
        return "".join(out)

    def flush(self) -> str:
        rest, self.pending = self.pending, ""
        return "" if self.stopped else self._visible(rest, final=True)

    def _token(self, special: str) -> None:
        self.removed += 1
        if special == "<<SYS>>":
            self.in_system = True
        elif special == "<</SYS>>":
            self.in_system = False
        elif not self.shown and _OPENERS.fullmatch(special):
            self.skip_role = True
        elif not self.shown and special in ("</s>", "<unk>", "<pad>"):
            pass
        else:
            self.stopped = True

    def _visible(self, text: str, *, final: bool = False) -> str:
        if self.in_system or not text:
            return ""
        if self.skip_role:
            stripped = text.lstrip()
            if (
                not final
                and len(stripped) < 10
                and any(r.startswith(stripped.lower()) for r in _ROLES)
            ):
                self.pending = text + self.pending  # wait to see whether a role name follows
                return ""
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


def remove_echoes(answer: str, *, prompt: str, question: str) -> str:
    """`answer` without the lines it copied from our prompt (rules, instructions) and without
    the question repeated at its start. Lines under 20 characters are left alone: short
    phrases may coincide with the prompt honestly."""
    prompt_lines = {_norm(line) for line in prompt.splitlines() if len(_norm(line)) >= 20}
    kept = [
        line
        for line in answer.splitlines()
        if not (len(_norm(line)) >= 20 and _norm(line) in prompt_lines)
    ]
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
