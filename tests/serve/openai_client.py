"""Drives `day0 serve` with the official openai client; every check raises on failure."""
import sys

import openai

base_url, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=key)
messages = [{"role": "user", "content": "Hello, who are you?"}]

# Chat, not streamed: a reply, usage, finish reason, logprobs with alternatives.
chat = client.chat.completions.create(model="mini", messages=messages, max_tokens=12, temperature=0,
                                      logprobs=True, top_logprobs=2)
choice = chat.choices[0]
assert chat.object == "chat.completion", chat
assert choice.message.role == "assistant" and choice.message.content, choice
assert choice.finish_reason in ("stop", "length"), choice.finish_reason
assert chat.usage.completion_tokens == len(choice.logprobs.content), chat.usage
assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
for t in choice.logprobs.content:
    assert t.logprob <= 0 and len(t.top_logprobs) == 2, t
text = choice.message.content

# The same, streamed: the deltas add up to the reply; usage comes last.
stream = client.chat.completions.create(model="mini", messages=messages, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True})
pieces, usage, finish = [], None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage
    for c in chunk.choices:
        if c.delta.content:
            pieces.append(c.delta.content)
        if c.finish_reason:
            finish = c.finish_reason
assert "".join(pieces) == text, ("".join(pieces), text)
assert finish == choice.finish_reason and usage is not None and usage.completion_tokens == chat.usage.completion_tokens

# A stop string from the middle of the reply: the text ends before it.
mid = len(text) // 2
stop = text[mid:mid + 2]
assert stop.strip(), f"no usable stop string in {text!r}"
cut = client.chat.completions.create(model="mini", messages=messages, max_tokens=12, temperature=0, stop=[stop])
assert cut.choices[0].message.content == text[:text.index(stop)], (cut.choices[0].message.content, stop)
assert cut.choices[0].finish_reason == "stop"

# Completions with logprobs.
comp = client.completions.create(model="mini", prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2)
c = comp.choices[0]
assert comp.object == "text_completion" and c.text is not None
assert len(c.logprobs.tokens) == comp.usage.completion_tokens and len(c.logprobs.top_logprobs[0]) == 2
streamed = "".join(ch.choices[0].text for ch in client.completions.create(
    model="mini", prompt="Once upon a time", max_tokens=6, temperature=0, stream=True) if ch.choices)
assert streamed == c.text, (streamed, c.text)

# Models, and the error object for a wrong model name.
assert [m.id for m in client.models.list().data] == ["mini"]
try:
    client.chat.completions.create(model="gpt-4o", messages=messages, max_tokens=2)
    raise AssertionError("a wrong model name was accepted")
except openai.NotFoundError as e:
    assert e.status_code == 404 and e.code == "model_not_found", (e.status_code, e.code, e.body)
try:
    openai.OpenAI(base_url=base_url, api_key="wrong").models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as e:
    assert e.status_code == 401
print(f"openai {openai.__version__}: chat, streaming, stop strings, completions, logprobs, errors: ok")
