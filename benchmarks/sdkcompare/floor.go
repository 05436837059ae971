package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor (-impls floor; Redis, steady run only) is the least a hand-written client
// does that keeps both halves of the family's contract: the layout the Python SDK
// shares on Redis, and a SPEC envelope made for each message. It is written with
// go-redis and encoding/json alone, none of the SDK's code:
//
//   - publish: two fresh version 4 UUIDs (meta.id, trace_id) from crypto/rand, the
//     created_at, data marshalled with encoding/json, the envelope appended by hand,
//     one RPUSH to the queue's list;
//   - consume: the reserve script (LMOVE to the processing list and the deadline
//     member's ZADD, in one script); on an empty list the blocking look (BLMOVE from the
//     list to its own head) with the script behind it in one pipeline, as the transport
//     sends it; the envelope read with encoding/json and its acceptance rule checked,
//     data read into the handler's type; then the gated settle script (ZREM of the
//     member, then LREM).
//
// The raw client (raws["redis"]) does neither: one fixed envelope template formatted
// per message, BLMOVE into a processing list and LREM, no deadline member.
var floors = map[string]func(context.Context, job) (result, error){"redis": floorRedis}

var (
	floorReserve = redis.NewScript(`
local raw = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
if raw then redis.call('zadd', KEYS[3], ARGV[1], ARGV[2] .. ':' .. raw) end
return raw`)
	floorSettle = redis.NewScript(`
if redis.call('zrem', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 1 then
  return redis.call('lrem', KEYS[1], 1, ARGV[2])
end
return 0`)
)

// floorEnvelope is what the floor's consumer reads of an envelope.
type floorEnvelope struct {
	Job      string          `json:"job"`
	URN      string          `json:"urn"`
	TraceID  string          `json:"trace_id"`
	Data     json.RawMessage `json:"data"`
	Attempts *int            `json:"attempts"`
	Meta     *struct {
		ID            string `json:"id"`
		Queue         string `json:"queue"`
		Lang          string `json:"lang"`
		SchemaVersion int    `json:"schema_version"`
		CreatedAt     int64  `json:"created_at"`
	} `json:"meta"`
}

// accepted applies SPEC's acceptance rule as the floor needs it: a URN, a meta block of
// schema version 1, a data object, a trace id and an attempts count.
func (e *floorEnvelope) accepted() error {
	switch {
	case e.Job == "" && e.URN == "":
		return errors.New("no URN")
	case e.Meta == nil || e.Meta.SchemaVersion != 1:
		return errors.New("no meta of schema version 1")
	case len(e.Data) == 0 || e.Data[0] != '{':
		return errors.New("no data object")
	case e.TraceID == "" || e.Attempts == nil:
		return errors.New("no trace id or attempts")
	}
	return nil
}

// floorUUID appends a fresh version 4 UUID, canonical text, to b.
func floorUUID(b []byte) []byte {
	var u [16]byte
	_, _ = rand.Read(u[:])
	u[6], u[8] = u[6]&0x0f|0x40, u[8]&0x3f|0x80
	var h [32]byte
	hex.Encode(h[:], u[:])
	b = append(b, h[:8]...)
	b = append(b, '-')
	b = append(b, h[8:12]...)
	b = append(b, '-')
	b = append(b, h[12:16]...)
	b = append(b, '-')
	b = append(b, h[16:20]...)
	b = append(b, '-')
	return append(b, h[20:]...)
}

// floorBody is a new envelope for data on queue q, appended by hand.
func floorBody(q string, data benchData) ([]byte, error) {
	d, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 256+len(d))
	b = append(b, `{"job":"`+urn+`","trace_id":"`...)
	b = floorUUID(b)
	b = append(b, `","data":`...)
	b = append(b, d...)
	b = append(b, `,"meta":{"id":"`...)
	b = floorUUID(b)
	b = append(b, `","queue":`...)
	b = strconv.AppendQuote(b, q)
	b = append(b, `,"lang":"go","schema_version":1,"created_at":`...)
	b = strconv.AppendInt(b, time.Now().UnixMilli(), 10)
	return append(b, `},"attempts":0}`...), nil
}

func floorRedis(ctx context.Context, j job) (result, error) {
	if j.Op != "publish" && j.Op != "consume" {
		return result{}, fmt.Errorf("floor: no %q run", j.Op)
	}
	opt, err := redis.ParseURL(j.URL)
	if err != nil {
		return result{}, err
	}
	c := redis.NewClient(opt)
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		return result{}, err
	}
	q := j.Queue
	if j.Op == "publish" {
		return publishAll(j, func(_, from, to int, at stamp) error {
			for i := from; i < to; i++ {
				b, err := floorBody(q, benchData{N: i, At: at(i)})
				if err != nil {
					return err
				}
				if err := c.RPush(ctx, q, b).Err(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, s := range []*redis.Script{floorReserve, floorSettle} {
		if err := s.Load(ctx, c).Err(); err != nil {
			return result{}, err
		}
	}
	keys := []string{q, q + ":processing", q + ":processing:deadlines"}
	return consumeWith(ctx, j, func(ctx context.Context, rec *recorder) error {
		empty := false
		for ctx.Err() == nil {
			var tok [16]byte
			_, _ = rand.Read(tok[:])
			token := hex.EncodeToString(tok[:])
			deadline := strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
			var rc *redis.Cmd
			if empty {
				pipe := c.Pipeline()
				look := pipe.Do(ctx, "blmove", q, q, "LEFT", "LEFT", "1")
				rc = pipe.EvalSha(ctx, floorReserve.Hash(), keys, deadline, token)
				_, _ = pipe.Exec(ctx)
				if err := look.Err(); err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
			} else {
				rc = floorReserve.EvalSha(ctx, c, keys, deadline, token)
			}
			raw, err := rc.Text()
			if empty = errors.Is(err, redis.Nil); empty {
				continue
			}
			if err != nil {
				return err
			}
			var e floorEnvelope
			if err := json.Unmarshal([]byte(raw), &e); err != nil {
				return err
			}
			if err := e.accepted(); err != nil {
				return err
			}
			var d benchData
			if err := json.Unmarshal(e.Data, &d); err != nil {
				return err
			}
			rec.add(d.N, d.At)
			if err := floorSettle.EvalSha(ctx, c, keys[1:], token, raw).Err(); err != nil {
				return err
			}
		}
		return nil
	})
}
