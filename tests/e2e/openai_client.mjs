// Tests that use the official `openai` npm client unmodified.
import assert from 'node:assert/strict';

export function openaiTests(t, { OpenAI, port, key, reference }) {
  const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });
  const model = 'tiny-kjv-chat';
  const chats = reference.filter((r) => r.kind === 'chat');
  const texts = reference.filter((r) => r.kind === 'text');
  const same = (a, b) => assert.equal(a.trimStart(), b.trimStart());

  t.test('openai: models.list and retrieve', async () => {
    // The served model first, then the LoRA adapters the server was started with.
    const list = await client.models.list();
    assert.deepEqual(list.data.map((m) => m.id), [model, 'shout']);
    assert.equal((await client.models.retrieve(model)).id, model);
    const shout = await client.models.retrieve('shout');
    assert.equal(shout.parent, model);
  });

  t.test('openai: greedy chat matches transformers, with usage', async () => {
    for (const ref of chats) {
      const r = await client.chat.completions.create({
        model, messages: [{ role: 'user', content: ref.prompt }], temperature: 0, max_tokens: 48,
      });
      same(r.choices[0].message.content, ref.greedy[1]);
      const eos = ref.greedy[0].at(-1) === 2;
      assert.equal(r.choices[0].finish_reason, eos ? 'stop' : 'length');
      assert.equal(r.usage.prompt_tokens, ref.prompt_ids.length);
      assert.equal(r.usage.completion_tokens, ref.greedy[0].length - (eos ? 1 : 0));
      assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    }
  });

  t.test('openai: streaming chat with usage equals the whole response', async () => {
    const ref = chats[1];
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: ref.prompt }], temperature: 0, max_tokens: 48,
      stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    let finish = null;
    let chunks = 0;
    for await (const c of stream) {
      chunks++;
      if (c.usage) {
        assert.equal(c.choices.length, 0, 'usage only in a final chunk without choices');
        usage = c.usage;
      }
      for (const ch of c.choices) {
        text += ch.delta.content || '';
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.ok(chunks > 3);
    same(text, ref.greedy[1]);
    assert.equal(finish, 'stop');
    assert.equal(usage.completion_tokens, ref.greedy[0].length - 1);
  });

  t.test('openai: n choices with their index; seeds reproduce', async () => {
    const req = { model, messages: [{ role: 'user', content: 'Tell me a fortune.' }], n: 3, seed: 42, max_tokens: 12, temperature: 1 };
    const a = await client.chat.completions.create(req);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    const b = await client.chat.completions.create(req);
    assert.deepEqual(b.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const got = ['', '', ''];
    for await (const c of stream) for (const ch of c.choices) got[ch.index] += ch.delta.content || '';
    assert.deepEqual(got, a.choices.map((c) => c.message.content));
  });

  t.test('openai: chat logprobs', async () => {
    const ref = chats[0];
    const r = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: ref.prompt }], temperature: 0, max_tokens: 10, logprobs: true, top_logprobs: 3,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 10);
    let joined = '';
    for (const e of content) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token, 'greedy picks the most likely token');
      assert.ok(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
      assert.equal(Buffer.from(e.bytes).toString('utf8'), e.token);
      joined += e.token;
    }
    same(joined, r.choices[0].message.content);
  });

  t.test('openai: completions (text, token ids, echo, stop, logprobs)', async () => {
    const ref = texts[0];
    const r = await client.completions.create({ model, prompt: ref.prompt, max_tokens: 48, temperature: 0 });
    same(r.choices[0].text, ref.greedy[1]);
    const ids = await client.completions.create({ model, prompt: ref.prompt_ids, max_tokens: 48, temperature: 0 });
    assert.equal(ids.choices[0].text, r.choices[0].text);
    const echo = await client.completions.create({ model, prompt: ref.prompt, max_tokens: 5, temperature: 0, echo: true });
    assert.ok(echo.choices[0].text.startsWith(ref.prompt));
    const stop = await client.completions.create({ model, prompt: ref.prompt, max_tokens: 48, temperature: 0, stop: ['earth'] });
    assert.equal(stop.choices[0].finish_reason, 'stop');
    assert.ok(!stop.choices[0].text.includes('earth'));
    assert.ok(ref.greedy[1].trimStart().startsWith(stop.choices[0].text.trimStart()));
    const lp = await client.completions.create({ model, prompt: ref.prompt, max_tokens: 6, temperature: 0, logprobs: 2 });
    const l = lp.choices[0].logprobs;
    assert.equal(l.tokens.length, 6);
    assert.equal(l.token_logprobs.length, 6);
    assert.equal(l.text_offset.length, 6);
    assert.equal(Object.keys(l.top_logprobs[0]).length, 2);
    const batch = await client.completions.create({ model, prompt: [texts[0].prompt, texts[1].prompt], max_tokens: 48, temperature: 0, n: 2 });
    assert.deepEqual(batch.choices.map((c) => c.index), [0, 1, 2, 3]);
    same(batch.choices[2].text, texts[1].greedy[1]);
  });

  t.test('openai: streaming completions with usage', async () => {
    const ref = texts[2];
    const stream = await client.completions.create({
      model, prompt: ref.prompt, max_tokens: 48, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = '';
    let usage = null;
    for await (const c of stream) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) text += ch.text;
    }
    same(text, ref.greedy[1]);
    assert.equal(usage.prompt_tokens, ref.prompt_ids.length);
  });

  t.test('openai: a forced tool call, whole and streamed; json_schema parsed', async () => {
    const tools = [{ type: 'function', function: { name: 'pick', parameters: {
      type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 } }, required: ['n'],
      additionalProperties: false } } }];
    const req = { model, messages: [{ role: 'user', content: 'Pick.' }], max_tokens: 200, seed: 1, temperature: 1,
      tools, tool_choice: { type: 'function', function: { name: 'pick' } } };
    const r = await client.chat.completions.create(req);
    const call = r.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'pick');
    const args = JSON.parse(call.function.arguments);
    assert.deepEqual(Object.keys(args), ['n']);
    assert.ok(Number.isInteger(args.n) && args.n >= 1 && args.n <= 9, call.function.arguments);
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    let name = '', streamed = '', finish = null;
    for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
      const c = chunk.choices[0];
      if (c.finish_reason) finish = c.finish_reason;
      for (const d of c.delta.tool_calls || []) {
        if (d.function?.name) name = d.function.name;
        streamed += d.function?.arguments || '';
      }
    }
    assert.equal(name, 'pick');
    assert.equal(streamed, call.function.arguments);  // same seed: the same arguments
    assert.equal(finish, 'tool_calls');
    const j = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Pick.' }],
      max_tokens: 200, response_format: { type: 'json_schema', json_schema: { name: 'p', strict: true,
        schema: tools[0].function.parameters } } });
    assert.ok(Number.isInteger(JSON.parse(j.choices[0].message.content).n));
  });

  t.test('openai: errors arrive as the client\'s error classes', async () => {
    const msg = [{ role: 'user', content: 'hi' }];
    await assert.rejects(client.chat.completions.create({ model, messages: msg, temperature: 5 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.chat.completions.create({ model: 'gpt-nope', messages: msg }),
      (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
    await assert.rejects(client.chat.completions.create({ model, messages: msg, max_tokens: 5000 }),
      (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
    await assert.rejects(client.chat.completions.create({ model, messages: msg, tools: [{ type: 'function', function: { name: 'f' } }] }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    const wrongKey = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrongKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
  });
}
