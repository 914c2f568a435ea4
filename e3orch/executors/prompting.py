"""Executor-side prompts for model executors (``openai``, ``local``) and rough token counts.

A subtask reaches a model as one user message: the instruction, then the outputs of the
subtask's dependencies (labelled by subtask id), each cut to a bounded length so that one
verbose upstream result cannot blow the context.

What this module deliberately does not do: render the *orchestrator's* prompt (that is the
policy's job, with executor cards), count tokens with a real tokenizer, or call any model.
"""

from __future__ import annotations

from collections.abc import Iterable

from e3orch.executors.base import SubtaskRequest

MAX_DEP_CHARS = 4000  # per dependency output shown to the executor


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters per token) for tools and missing usage."""
    return (len(text) + 3) // 4


def render_context(context: Iterable[tuple[str, str]], max_chars: int = MAX_DEP_CHARS) -> str:
    """Dependency outputs as ``[id] output`` blocks; long outputs keep their head and tail."""
    blocks = []
    for dep_id, output in context:
        text = output.strip()
        if len(text) > max_chars:
            half = max_chars // 2
            text = f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"
        blocks.append(f"[{dep_id}]\n{text}")
    return "\n\n".join(blocks)


def build_messages(request: SubtaskRequest, system_prompt: str | None = None) -> list[dict[str, str]]:
    """Chat messages for one subtask: optional system prompt, then the instruction with its inputs."""
    user = request.instruction.strip()
    if request.context:
        user += (
            "\n\nResults of earlier subtasks you can use:\n\n"
            + render_context(request.context)
        )
    messages = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": user})
    return messages
