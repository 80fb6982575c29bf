"""Semantic caching of an LLM call: paraphrases reuse an earlier answer, other models or system
prompts never do. python examples/llm_function.py"""

from cachekit import Cache, Status

cache = Cache(namespace="llm-example")
calls: list[object] = []


@cache.semantic(ttl=24 * 3600)
def complete(prompt: str, *, model: str, system: str = "You are helpful.") -> str:
    calls.append(prompt)  # in real code: client.chat.completions.create(...)
    return f"({model}) {prompt.upper()}"


complete("What is the capital of France?", model="gpt-4o-mini")
again = complete("Which city is the capital of France?", model="gpt-4o-mini")  # served
other = complete("Which city is the capital of France?", model="gpt-4.1")  # other scope: runs
near = complete.lookup("What is the capital of Germany?", model="gpt-4o-mini")
print(f"model calls: {len(calls)}; paraphrase served: {again!r}; near miss: {near.status.value}")
assert len(calls) == 2 and near.status is Status.MISS
complete.close()
cache.close()
