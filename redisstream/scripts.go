package redisstream

import "github.com/redis/go-redis/v9"

// The scripts below make each settlement one atomic step on the server.
// Every script checks first that the entry is still pending for the group,
// so a settlement that lost the race with another member (or with an
// earlier settlement) changes nothing. Writes come before XACK so that an
// error inside a script (which Redis does not roll back) can never ack an
// entry whose copy was not written.

// nackScript makes a pending entry claimable again after a delay by setting
// its idle time, without counting a delivery; the reclaimer hands it out
// (counting the delivery) once it has been idle for the ack timeout. For a
// delay longer than the ack timeout the entry's idle time is reset and a
// hold is recorded: in the topic's hold ZSET, scored by its due time (the
// server's clock, rounded up to the millisecond and one more, since the
// server counts whole milliseconds), and in the hold index, which names
// the hold by entry with the entry's owner. The promoter keeps the idle
// time fresh until the due time comes near, and the reclaim puts back a
// held entry it took before the due time (autoclaimScript). A new hold
// replaces the entry's earlier one. With ARGV[8] = "1" (a release or a
// snooze, which do not count) it also sets the entry's delivery counter
// one lower, so that the reclaim that hands it out again (and counts a
// delivery) brings it back to this delivery's count.
//
// KEYS[1] stream, KEYS[2] hold ZSET, KEYS[3] hold index.
// ARGV[1] group, ARGV[2] consumer, ARGV[3] entry id, ARGV[4] idle ms,
// ARGV[5] hold delay in ms ("0" = no hold), ARGV[6] the ack timeout in ms
// the hold records, ARGV[7] the delivery count of the nacked delivery
// ("0" = unknown), ARGV[8] "1" to leave the delivery uncounted (needs a
// known count).
// Returns 1 when nacked, 0 when the entry is no longer pending, -1 when
// it was delivered again since (another consumer owns it, or its delivery
// count moved).
var nackScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
if ARGV[7] ~= '0' and p[1][4] ~= tonumber(ARGV[7]) then return -1 end
local n = p[1][4]
if ARGV[8] == '1' then n = n - 1 end
if ARGV[5] ~= '0' then
  local t = redis.call('TIME')
  local due = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5]) + 1
  local f = ARGV[1] .. '\0' .. ARGV[3]
  local tail = ARGV[6] .. '\0' .. n
  local old = redis.call('HGET', KEYS[3], f)
  if old then
    local a = string.find(old, '\0', 1, true)
    local b = string.find(old, '\0', a + 1, true)
    redis.call('ZREM', KEYS[2], f .. '\0' .. string.sub(old, 1, b - 1))
  end
  redis.call('ZADD', KEYS[2], string.format('%d', due), f .. '\0' .. tail)
  redis.call('HSET', KEYS[3], f, tail .. '\0' .. ARGV[2])
end
if ARGV[8] == '1' then
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'RETRYCOUNT', n, 'JUSTID')
else
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
end
return 1
`)

// extendScript resets the idle time of an entry this consumer owns,
// without counting a delivery.
//
// KEYS[1] stream. ARGV[1] group, ARGV[2] consumer, ARGV[3] entry id,
// ARGV[4] delivery count ("0" = unknown).
// Returns 1 when extended, 0 when not pending, -1 when delivered again
// since.
var extendScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
if ARGV[4] ~= '0' and p[1][4] ~= tonumber(ARGV[4]) then return -1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
`)

// deadLetterScript adds a copy to the dead-letter stream and acks the
// original, if the same delivery of it is still pending.
//
// KEYS[1] source stream, KEYS[2] dead-letter stream.
// ARGV[1] group, ARGV[2] entry id, ARGV[3] MAXLEN ("0" = none),
// ARGV[4] consumer, ARGV[5] delivery count ("0" = unknown),
// ARGV[6..] the copy's fields.
// Returns 1 when moved, 0 when the entry was no longer pending, -1 when
// it was delivered again since.
var deadLetterScript = redis.NewScript(`
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[4] then return -1 end
if ARGV[5] ~= '0' and p[1][4] ~= tonumber(ARGV[5]) then return -1 end
if ARGV[3] ~= '0' then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(ARGV, 6))
else
  redis.call('XADD', KEYS[2], '*', unpack(ARGV, 6))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// holdScript is one pass of the promoter over a topic's hold ZSET. For each
// hold it looks the entry up in the group's pending list: a settled entry
// drops the hold; an entry due within its ack timeout gets the idle time
// that makes it claimable exactly at its due time and the hold is dropped;
// any other entry has its idle time reset when it has used half its ack
// timeout, so that it is rarely idle long enough for a reclaim to take it
// (which would put it back: see autoclaimScript). An entry whose delivery
// count moved since the nack (it was handed out anyway) drops the hold and
// is left to its new owner. Dropping a hold drops its entry in the hold
// index when the index names that hold; a kept hold the index lacks is
// added to it, with the entry's owner.
//
// KEYS[1] stream, KEYS[2] hold ZSET, KEYS[3] hold index. ARGV[1] rank of
// the first hold to visit, ARGV[2] max holds to visit. Members are
// "<group>\0<entry id>\0<ack timeout ms>\0<delivery count at the nack>".
// Returns {visited, removed}.
var holdScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local off = tonumber(ARGV[1])
local items = redis.call('ZRANGE', KEYS[2], off, off + tonumber(ARGV[2]) - 1, 'WITHSCORES')
local removed = 0
for i = 1, #items, 2 do
  local m = items[i]
  local due = tonumber(items[i + 1])
  local a = string.find(m, '\0', 1, true)
  local b = string.find(m, '\0', a + 1, true)
  local group = string.sub(m, 1, a - 1)
  local id = string.sub(m, a + 1, b - 1)
  local c = string.find(m, '\0', b + 1, true)
  local at = tonumber(string.sub(m, b + 1, c - 1))
  local count = tonumber(string.sub(m, c + 1))
  local f = string.sub(m, 1, b - 1)
  local tail = string.sub(m, b + 1) .. '\0'
  local ix = redis.call('HGET', KEYS[3], f)
  local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], group, id, id, 1)
  local drop = not ok or #p == 0 or p[1][4] ~= count
  if not drop then
    local left = due - now
    if left <= at then
      if left < 0 then left = 0 end
      redis.call('XCLAIM', KEYS[1], group, p[1][2], 0, id, 'IDLE', at - left, 'JUSTID')
      drop = true
    else
      if p[1][3] * 2 >= at then
        redis.call('XCLAIM', KEYS[1], group, p[1][2], 0, id, 'JUSTID')
      end
      if not ix then redis.call('HSET', KEYS[3], f, tail .. p[1][2]) end
    end
  end
  if drop then
    if ix and string.sub(ix, 1, #tail) == tail then redis.call('HDEL', KEYS[3], f) end
    redis.call('ZREM', KEYS[2], m)
    removed = removed + 1
  end
end
return {#items / 2, removed}
`)

// dropConsumerScript deletes a consumer that owns no pending entry, so
// closed subscriptions do not pile up in the group. A consumer that still
// owns entries is kept: deleting it would drop them from the pending list.
//
// KEYS[1] stream. ARGV[1] group, ARGV[2] consumer. Returns 1 if deleted.
var dropConsumerScript = redis.NewScript(`
local ok, p = pcall(redis.call, 'XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if not ok or #p > 0 then return 0 end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
`)

// pubScript publishes a batch when a message with a caller-set ID (and
// the topic's dedup window on) or a DeliverAt asks for more than XADDs.
//
// A caller-set ID is recorded in the hash of the current time bucket of
// the window's length (server time), unless the hash of the bucket before
// holds it already; a recorded ID means the message was published within
// the window, and it is not stored again. So an ID is remembered for at
// least the window and at most two. Two hashes take turns, even buckets
// in KEYS[4] and odd ones in KEYS[5]; each holds its bucket's stamp
// ("<bucket>:<window ms>") under the field "" (no ID is empty), is
// emptied when a new bucket takes it over, and expires by itself when its
// bucket stops being the one before. HGET and HSET (which adds a field
// only when it is new) do the lookups, so the least-privilege user needs
// no other hash command. A message whose ID the bus generated is not
// recorded: its ID is unique by construction.
//
// A message due later goes to the topic's schedule stream, and its
// entry's ID to the due ZSET scored by the due time, as a member with
// both parts of the ID zero-padded so that messages due in the same
// millisecond are promoted in the order they were published; any other is
// added to the stream with the trim arguments. Every key carries the
// topic's hash tag. An error stops the script with the messages before it
// stored; the caller retries the batch, and the window keeps those with
// caller-set IDs from being stored twice.
//
// KEYS[1] stream, KEYS[2] schedule stream, KEYS[3] due ZSET, KEYS[4] and
// KEYS[5] the hashes of IDs. ARGV[1] dedup window in ms, ARGV[2] count
// of trim arguments (0 or 3), then the trim arguments, then per message
// the ID to record ("": none), its due time in ms ("0": now), its count
// of fields and its stream fields. Returns one character per message: "1" stored,
// "0" a duplicate.
var pubScript = redis.NewScript(pubScriptSource)

const pubScriptSource = `
local function buckets()
  local w = tonumber(ARGV[1])
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local b = math.floor(now / w)
  local cur, before = KEYS[4 + b % 2], KEYS[5 - b % 2]
  local stamp = string.format('%d:%d', b, w)
  if redis.call('HGET', cur, '') ~= stamp then
    redis.call('DEL', cur)
    redis.call('HSET', cur, '', stamp)
    redis.call('PEXPIRE', cur, string.format('%d', (b + 2) * w - now))
  end
  if redis.call('HGET', before, '') ~= string.format('%d:%d', b - 1, w) then before = nil end
  return cur, before
end
local n = tonumber(ARGV[2])
local a = 3 + n
local cur, before
local out = {}
while a <= #ARGV do
  local id, due, nf = ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
  a = a + 3
  local fresh = true
  if id ~= '' then
    if not cur then cur, before = buckets() end
    fresh = not (before and redis.call('HGET', before, id)) and redis.call('HSET', cur, id, '') == 1
  end
  if fresh then
    local eid
    if due ~= '0' then
      eid = redis.call('XADD', KEYS[2], '*', unpack(ARGV, a, a + nf - 1))
    elseif n == 0 then
      eid = redis.call('XADD', KEYS[1], '*', unpack(ARGV, a, a + nf - 1))
    else
      eid = redis.call('XADD', KEYS[1], ARGV[3], ARGV[4], ARGV[5], '*', unpack(ARGV, a, a + nf - 1))
    end
    if due ~= '0' then
      local ms, seq = string.match(eid, '^(%d+)-(%d+)$')
      redis.call('ZADD', KEYS[3], due, string.format('%015d-%010d', tonumber(ms), tonumber(seq)))
    end
    out[#out + 1] = '1'
  else
    out[#out + 1] = '0'
  end
  a = a + nf
end
return table.concat(out)
`

// promoteScript moves the scheduled messages that are due into the
// topic's stream, in due order, at most ARGV[2] of them: each is added
// with the stream's trim arguments and removed from the schedule, in one
// atomic step, so any number of members may run it.
//
// KEYS[1] stream, KEYS[2] schedule stream, KEYS[3] due ZSET. ARGV[1] now
// in ms, ARGV[2] max entries, ARGV[3..] the XADD trim arguments (none, or
// MAXLEN/MINID ~ n). Returns {promoted, next due time in ms or -1}.
var promoteScript = redis.NewScript(`
local members = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(members) do
  local ms, seq = string.match(m, '^(%d+)-(%d+)$')
  local id = tonumber(ms) .. '-' .. tonumber(seq)
  local e = redis.call('XRANGE', KEYS[2], id, id)
  if #e > 0 then
    local args = {'XADD', KEYS[1]}
    for i = 3, #ARGV do args[#args + 1] = ARGV[i] end
    args[#args + 1] = '*'
    for _, v in ipairs(e[1][2]) do args[#args + 1] = v end
    redis.call(unpack(args))
    redis.call('XDEL', KEYS[2], id)
  end
  redis.call('ZREM', KEYS[3], m)
end
local nxt = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if #nxt == 0 then return {#members, -1} end
return {#members, tonumber(nxt[2])}
`)

// groupLeaseScript records a member's ack timeout in the topic's lease
// hash and returns the group's lease: the longest ack timeout any member
// of the group subscribed with. The group reclaims by it, so a member
// with a short timeout never takes over an entry a member with a longer
// one still holds and keeps alive.
//
// KEYS[1] lease HASH. ARGV[1] group, ARGV[2] the member's ack timeout in
// ms. Returns the group's lease in ms.
var groupLeaseScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local mine = tonumber(ARGV[2])
if mine > cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return mine
end
return cur
`)

// autoclaimScript is XAUTOCLAIM with the group's lease as its min-idle:
// the larger of the caller's ack timeout and the lease recorded in the
// lease hash, read in the same atomic step, so a member that subscribed
// before a longer-lived one joined never reclaims by its own shorter
// timeout. It also reads the delivery count of each claimed entry
// (XPENDING), so a reclaim is one round trip.
//
// A held entry is never handed out before its due time, whatever the
// promoter's timing: a claimed entry the hold index names, with the
// delivery count its hold recorded (plus the one XAUTOCLAIM counted), is
// put back in the same step while its due time (the server's clock) is
// ahead. It returns to the owner the hold recorded with that delivery
// count (XCLAIM ... RETRYCOUNT ... JUSTID), so that no delivery is
// counted and the hold stays valid, with the idle time that makes it
// claimable at its due time when that comes within the lease (the hold
// is then dropped, as the promoter drops it) and otherwise none; it is
// not returned. A claimed entry whose hold is due, or stale (its count
// moved since the nack), drops the hold and is handed out. The cursor
// moves past put-back entries, so they never stall a scan pass.
//
// KEYS[1] stream, KEYS[2] lease HASH, KEYS[3] hold ZSET, KEYS[4] hold
// index. ARGV[1] group, ARGV[2] consumer, ARGV[3] the caller's ack
// timeout in ms, ARGV[4] start id, ARGV[5] COUNT. Returns {lease ms,
// XAUTOCLAIM reply without the entries put back, delivery count of each
// claimed entry (0: unknown)}.
var autoclaimScript = redis.NewScript(`
local lease = math.max(tonumber(ARGV[3]), tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0'))
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], lease, ARGV[4], 'COUNT', ARGV[5])
local now
local kept, counts = {}, {}
for _, e in ipairs(r[2]) do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)
  local n = 0
  if #p > 0 then n = p[1][4] end
  local back = false
  local f = ARGV[1] .. '\0' .. e[1]
  local ix = redis.call('HGET', KEYS[4], f)
  if ix then
    local a = string.find(ix, '\0', 1, true)
    local b = string.find(ix, '\0', a + 1, true)
    local m = f .. '\0' .. string.sub(ix, 1, b - 1)
    local count = tonumber(string.sub(ix, a + 1, b - 1))
    local due = redis.call('ZSCORE', KEYS[3], m)
    local left = 0
    if due and n == count + 1 then
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      left = tonumber(due) - now
    end
    if left > 0 then
      back = true
      local idle = 0
      if left <= lease then idle = lease - left end
      redis.call('XCLAIM', KEYS[1], ARGV[1], string.sub(ix, b + 1), 0, e[1], 'IDLE', idle, 'RETRYCOUNT', count, 'JUSTID')
    end
    if left <= lease then
      redis.call('HDEL', KEYS[4], f)
      if due then redis.call('ZREM', KEYS[3], m) end
    end
  end
  if not back then
    kept[#kept + 1] = e
    counts[#kept] = n
  end
end
r[2] = kept
return {lease, r, counts}
`)

// lockGroupScript takes or renews a group lock (backend.GroupLocker). The
// lock key expires with the lock; the last-holder key stays until an
// unlock, so a lock found free with a last holder other than the caller
// was let lapse: a takeover. The group joins the topic's lock registry,
// from which DeleteTopic names the lock keys.
//
// KEYS[1] lock, KEYS[2] last holder, KEYS[3] the registry (ZSET).
// ARGV[1] holder, ARGV[2] ttl in ms, ARGV[3] group. Returns {held,
// takeover}.
var lockGroupScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZADD', KEYS[3], 0, ARGV[3])
  return {1, 0}
end
if cur then return {0, 0} end
local prev = redis.call('GET', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 0, ARGV[3])
if prev and prev ~= ARGV[1] then return {1, 1} end
return {1, 0}
`)

// unlockGroupScript releases a group lock its holder holds, and takes the
// group out of the topic's lock registry.
//
// KEYS[1] lock, KEYS[2] last holder, KEYS[3] the registry. ARGV[1]
// holder, ARGV[2] group. Returns 1 if released.
var unlockGroupScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[2])
return 1
`)

// deleteTopicScript deletes the keys of a topic: the ones listed, and
// the lock and last-holder keys of each group in the topic's lock
// registry or on its stream (groups that locked before the registry
// existed), named from the stream key. Every key is in the topic's slot.
//
// KEYS[1] stream, KEYS[2] lock registry, KEYS[3..] the topic's other
// keys. Returns the number of keys deleted.
var deleteTopicScript = redis.NewScript(`
local groups = redis.call('ZRANGE', KEYS[2], 0, -1)
local info = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(info) == 'table' and not info.err then
  for _, g in ipairs(info) do
    for i = 1, #g, 2 do
      if g[i] == 'name' then groups[#groups + 1] = g[i + 1] end
    end
  end
end
local n = 0
for i = 1, #groups, 256 do
  local del = {}
  for j = i, math.min(i + 255, #groups) do
    del[#del + 1] = KEYS[1] .. '#lock:' .. groups[j]
    del[#del + 1] = KEYS[1] .. '#lockby:' .. groups[j]
  end
  n = n + redis.call('DEL', unpack(del))
end
return n + redis.call('DEL', unpack(KEYS))
`)
