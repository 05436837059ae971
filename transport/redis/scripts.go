package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts below change a queue, each atomically, in the keys and member formats
// shared with the other BabelQueue SDKs (docs/transports/redis.md): a reservation of the
// default layout is the element in "<q>:processing" and the member "<token>:<raw>" (token:
// 32 lowercase hex digits) in "<q>:processing:deadlines", scored with when it lapses.

// reserveDefault reserves up to n elements. With ARGV[4] "1" it first migrates due
// delayed messages and returns lapsed reservations to the end of the ready list (the
// consumer asks at least every [sweepEvery]; with no tokens the call only sweeps: a
// consumer about to wait sends it ahead of its blocking look when a sweep is due).
//
// Before all that it acknowledges the deferred acks it is given (see [WithDeferredAcks]),
// each exactly as the settle script does.
//
//	KEYS[1] ready list, KEYS[2] processing list, KEYS[3] deadlines zset, KEYS[4] delayed zset
//	ARGV[1] now (Unix seconds), ARGV[2] deadline score, ARGV[3] sweep limit,
//	ARGV[4] "1" to sweep, ARGV[5] the number k of acks, ARGV[6..5+2k] each ack's token
//	and raw element (its member is "<token>:<raw>"), then one token per element wanted
//
// It returns a string with one character per ack, "1" when settled and "0" when its
// reservation was no longer ours, then the raw elements reserved, in order, one per
// token used.
var reserveDefault = goredis.NewScript(`
local nacks = tonumber(ARGV[5])
local out = {''}
if nacks > 0 then
  local flags = {}
  for i = 6, 5 + 2 * nacks, 2 do
    local ok = redis.call('zrem', KEYS[3], ARGV[i] .. ':' .. ARGV[i + 1]) == 1 and redis.call('lrem', KEYS[2], 1, ARGV[i + 1]) == 1
    flags[#flags + 1] = ok and '1' or '0'
  end
  out[1] = table.concat(flags)
end
if ARGV[4] == '1' then
  local now = ARGV[1]
  local due = redis.call('zrangebyscore', KEYS[4], '-inf', now, 'limit', 0, 100)
  for _, m in ipairs(due) do
    redis.call('zrem', KEYS[4], m)
    if #m >= 33 and string.byte(m, 33) == 58 then
      redis.call('rpush', KEYS[1], string.sub(m, 34))
    end
  end
  local lapsed = redis.call('zrangebyscore', KEYS[3], '-inf', now, 'limit', 0, tonumber(ARGV[3]))
  for _, m in ipairs(lapsed) do
    if #m >= 33 and string.byte(m, 33) == 58 then
      local raw = string.sub(m, 34)
      if redis.call('lrem', KEYS[2], 1, raw) == 1 then
        redis.call('rpush', KEYS[1], raw)
      end
    end
    redis.call('zrem', KEYS[3], m)
  end
end
for i = 6 + 2 * nacks, #ARGV do
  local raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not raw then break end
  redis.call('zadd', KEYS[3], ARGV[2], ARGV[i] .. ':' .. raw)
  out[#out + 1] = raw
end
return out
`)

// reserveWoken reserves up to n elements once a consumer's blocking look on the ready
// list returned (default layout), sent behind the look in its pipeline: the least the
// family's layout asks of a reservation, so that a message pushed to an idle queue
// reaches the worker by the shortest path (issue 39). It never sweeps: the consumer
// sends a due sweep ahead of its look.
//
//	KEYS[1] ready list, KEYS[2] processing list, KEYS[3] deadlines zset
//	ARGV[1] deadline score, then one token per element wanted
//
// When the first element reserved leaves the ready list empty (a message that ended an
// idle wait, the usual case) it returns that element alone, as a string: a table reply
// and a loop cost Redis a third more on the path every such message takes (measured in
// docs/transports/redis.md). Otherwise it returns the raw elements reserved, in order,
// one per token used, then, when every token was used, how many elements the ready list
// still holds (an integer); nothing reserved is an empty table.
var reserveWoken = goredis.NewScript(reserveWokenSource)

// reserveWokenSource is [reserveWoken]'s Lua, which a consumer loads ahead of its first
// look (see [consumer.wake]).
const reserveWokenSource = `
local raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if not raw then return {} end
redis.call('zadd', KEYS[3], ARGV[1], ARGV[2] .. ':' .. raw)
local left = redis.call('llen', KEYS[1])
if left == 0 then return raw end
local out = {raw}
for i = 3, #ARGV do
  raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
  if not raw then return out end
  redis.call('zadd', KEYS[3], ARGV[1], ARGV[i] .. ':' .. raw)
  out[i - 1] = raw
end
out[#ARGV] = (#ARGV == 2) and left or redis.call('llen', KEYS[1])
return out
`

// reserveLaravel is Laravel's migrate-then-pop, for up to n jobs: due delayed jobs and
// (when recovery is on) lapsed reservations go back to the ready list with one notify
// token each, then each popped job is reserved as a copy whose attempts is one higher.
// A job that does not decode, or has no numeric attempts, is reserved as it is.
//
//	KEYS[1] ready list, KEYS[2] reserved zset, KEYS[3] notify list, KEYS[4] delayed zset
//	ARGV[1] now (Unix seconds), ARGV[2] reservation score, ARGV[3] n,
//	ARGV[4] "1" to migrate lapsed reservations, KEYS[5] the Go-owned header hash
//
// It returns job, reserved, headers, job, reserved, headers, … for the jobs popped
// (headers: the JSON object stored for the job in the header hash, or "").
var reserveLaravel = goredis.NewScript(`
local now = ARGV[1]
local function migrate(from)
  local due = redis.call('zrangebyscore', from, '-inf', now, 'limit', 0, 100)
  for _, m in ipairs(due) do
    redis.call('zrem', from, m)
    redis.call('rpush', KEYS[1], m)
    redis.call('rpush', KEYS[3], 1)
  end
end
migrate(KEYS[4])
if ARGV[4] == '1' then migrate(KEYS[2]) end
local out = {}
for i = 1, tonumber(ARGV[3]) do
  local job = redis.call('lpop', KEYS[1])
  if not job then break end
  local reserved = job
  local ok, decoded = pcall(cjson.decode, job)
  if ok and type(decoded) == 'table' and type(decoded['attempts']) == 'number' then
    decoded['attempts'] = decoded['attempts'] + 1
    local eok, encoded = pcall(cjson.encode, decoded)
    if eok then reserved = encoded end
  end
  redis.call('zadd', KEYS[2], ARGV[2], reserved)
  redis.call('lpop', KEYS[3])
  out[#out + 1] = job
  out[#out + 1] = reserved
  out[#out + 1] = redis.call('hget', KEYS[5], redis.sha1hex(job)) or ''
end
return out
`)

// settle finishes reservations of one queue, each in one atomic step: the gate (removing
// its member must succeed: the reservation is still ours), then its removal, rewind or
// settle writes.
//
//	KEYS[1] processing list (default) or reserved zset (laravel)
//	KEYS[2] deadlines zset (default) or the Go-owned header hash (laravel)
//	KEYS[3] ready list, KEYS[4] notify list (laravel; default: unused, the ready list again)
//	KEYS[5..] the keys the writes touch, in order
//	ARGV[1] layout "d" or "l", then per reservation: its token (default: the member is
//	"<token>:<raw>", put together here so that the body is sent once) or its reserved
//	member (laravel), its raw element, "ack" or "rewind", and the number of writes, then per write: op, score, value, where op is
//	"r" (RPUSH KEYS[k]), "n" (RPUSH KEYS[k], RPUSH KEYS[k+1] 1) or "z" (ZADD KEYS[k]),
//	and a headers JSON object ("" for none); with headers the next key is the header hash
//	(laravel), where they are stored under the SHA-1 of the value.
//
// It returns one integer per reservation: 1 when settled, 0 when it was no longer ours
// (then nothing was written for it). Redis does not undo a script's commands when a
// later one fails, so the script first checks that every key a write touches is missing
// or of the type the write needs, else fails with WRONGTYPE having changed nothing
// (issue 16).
var settle = goredis.NewScript(`
local default = ARGV[1] == 'd'
local want, j, kk = {}, 2, 5
while j <= #ARGV do
  local nw = tonumber(ARGV[j + 3])
  j = j + 4
  for _ = 1, nw do
    local op, hdr = ARGV[j], ARGV[j + 3]
    j = j + 4
    if op == 'z' then
      want[#want + 1] = {KEYS[kk], 'zset'}
      kk = kk + 1
    elseif op == 'n' then
      want[#want + 1] = {KEYS[kk], 'list'}
      want[#want + 1] = {KEYS[kk + 1], 'list'}
      kk = kk + 2
    else
      want[#want + 1] = {KEYS[kk], 'list'}
      kk = kk + 1
    end
    if hdr ~= '' then
      want[#want + 1] = {KEYS[kk], 'hash'}
      kk = kk + 1
    end
  end
end
for _, w in ipairs(want) do
  local t = redis.call('type', w[1])['ok']
  if t ~= 'none' and t ~= w[2] then
    return redis.error_reply('WRONGTYPE settle write to ' .. w[1] .. ': the key holds a ' .. t .. ', not a ' .. w[2] .. '; nothing was changed')
  end
end
local out = {}
local k = 5
local i = 2
while i <= #ARGV do
  local member, raw, rewind, nw = ARGV[i], ARGV[i + 1], ARGV[i + 2] == 'rewind', tonumber(ARGV[i + 3])
  i = i + 4
  local ok
  if default then
    ok = redis.call('zrem', KEYS[2], member .. ':' .. raw) == 1 and redis.call('lrem', KEYS[1], 1, raw) == 1
    if ok and rewind then redis.call('lpush', KEYS[3], raw) end
  else
    ok = redis.call('zrem', KEYS[1], member) == 1
    if ok and rewind then
      redis.call('lpush', KEYS[3], raw)
      redis.call('rpush', KEYS[4], 1)
    elseif ok then
      redis.call('hdel', KEYS[2], redis.sha1hex(raw))
    end
  end
  for _ = 1, nw do
    local op, score, value, hdr = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    i = i + 4
    if op == 'z' then
      if ok then redis.call('zadd', KEYS[k], score, value) end
      k = k + 1
    elseif op == 'n' then
      if ok then
        redis.call('rpush', KEYS[k], value)
        redis.call('rpush', KEYS[k + 1], 1)
      end
      k = k + 2
    else
      if ok then redis.call('rpush', KEYS[k], value) end
      k = k + 1
    end
    if hdr ~= '' then
      if ok then redis.call('hset', KEYS[k], redis.sha1hex(value), hdr) end
      k = k + 1
    end
  end
  out[#out + 1] = ok and 1 or 0
end
return out
`)

// pushLaravel is a publish in the Laravel layout: the job on the ready list and one
// notify token (op "n"), or the job in the delayed set (op "z"), and its headers (if
// any) in the Go-owned header hash.
//
//	KEYS[1] ready list or delayed set, KEYS[2] notify list (op "z": unused),
//	KEYS[3] header hash, ARGV[1] op, ARGV[2] job, ARGV[3] due score (op "z"),
//	ARGV[4] headers JSON or ""
var pushLaravel = goredis.NewScript(`
if ARGV[1] == 'z' then
  redis.call('zadd', KEYS[1], ARGV[3], ARGV[2])
else
  redis.call('rpush', KEYS[1], ARGV[2])
  redis.call('rpush', KEYS[2], 1)
end
if ARGV[4] ~= '' then
  redis.call('hset', KEYS[3], redis.sha1hex(ARGV[2]), ARGV[4])
end
return 1
`)
