/**
 * A script's many-call twin (call-flush.ts): its Lua run once per call, in the order given, each
 * with its own answer, so that the calls one loop turn made share one round trip and one EVALSHA.
 *
 * The shared Lua (preludes and their functions) reads KEYS and ARGV: in the twin they are locals
 * that each call refills in place, declared before the preludes, so the same Lua serves both.
 * KEYS: the `keysPerCall` keys of each call, in turn. ARGV: the number of calls, then for each its
 * argument count and its arguments. Answers one element per call: the body's answer, or
 * 'err <message>' where the body answered redis.error_reply (the single script's error).
 */
export function manyCallsLua(prelude: string, body: string, keysPerCall: number): string {
  return `local ALL_KEYS, ALL_ARGV = KEYS, ARGV
local KEYS, ARGV = {}, {}
${prelude}
local function one()
${body}
end
local answers, at = {}, 2
for c = 1, tonumber(ALL_ARGV[1]) do
  for i = 1, ${keysPerCall} do KEYS[i] = ALL_KEYS[${keysPerCall} * (c - 1) + i] end
  local count = tonumber(ALL_ARGV[at])
  for i = #ARGV, count + 1, -1 do ARGV[i] = nil end
  for i = 1, count do ARGV[i] = ALL_ARGV[at + i] end
  at = at + count + 1
  local answer = one()
  if type(answer) == 'table' and answer.err then answer = 'err ' .. tostring(answer.err) end
  answers[c] = answer
end
return answers
`;
}

/** The arguments of one round trip of a many-call twin: numKeys, the keys, then ARGV as above. */
export function manyCallsArgs(calls: readonly { readonly keys: readonly string[]; readonly args: readonly (string | number | Buffer)[] }[]): (string | number | Buffer)[] {
  const keys: string[] = [];
  const args: (string | number | Buffer)[] = [calls.length];
  for (const call of calls) {
    keys.push(...call.keys);
    args.push(call.args.length, ...call.args);
  }
  return [keys.length, ...keys, ...args];
}
