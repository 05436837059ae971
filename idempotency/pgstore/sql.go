package pgstore

import (
	"math"
	"strings"
	"time"
)

// statements are the store's SQL for one layout and table.
type statements struct {
	// claim: $1 id, $2 lease (ms; PHP: s), reference $3 random token. One row: kind 1,
	// claimed, with the token of the claim (reference: claim_token; PHP: expires_at); or
	// the row it could not take, kind 2 remembered or 3 claimed, and the seconds left
	// until it lapses (NULL: never). No row: the row was committed after the
	// statement's snapshot.
	claim string
	// release: $1 id, $2 token (PHP: the claim's expires_at).
	release string
	// seen: $1 id; one boolean.
	seen string
	// remember: $1 id, $2 TTL (ms; PHP: s; 0: none).
	remember string
	// forget: $1 id.
	forget string
	// deleteExpired: $1 batch size.
	deleteExpired string
}

// isClaim tells, in the reference layout, a claim of this store from a remembered id:
// claim_token ends with "@" and the claim's expires_at in Unix microseconds, written
// together. A reference worker that takes over a lapsed claim rewrites expires_at and
// leaves the column alone: the row is then its remembered id.
const isClaim = `COALESCE(claim_token LIKE '%@' || (extract(epoch FROM expires_at) * 1000000)::bigint, false)`

// nowSeconds is the PHP layout's clock: the database's now() in whole Unix seconds.
const nowSeconds = `floor(extract(epoch FROM now()))::bigint`

func statementsFor(l Layout, table string) statements {
	var q statements
	if l == LayoutPHP {
		q = statements{
			claim: `
WITH claimed AS (
    INSERT INTO {T} AS cur (message_id, state, expires_at)
    VALUES ($1::text, 'claimed', {NOW_S} + $2::bigint)
    ON CONFLICT (message_id) DO UPDATE SET state = 'claimed', expires_at = EXCLUDED.expires_at
        WHERE cur.expires_at IS NOT NULL AND cur.expires_at < {NOW_S}
    RETURNING expires_at
)
SELECT 1, expires_at::text, NULL::float8 FROM claimed
UNION ALL
SELECT CASE WHEN state = 'seen' THEN 2 ELSE 3 END, NULL, (expires_at + 1 - extract(epoch FROM now()))::float8 FROM {T}
WHERE message_id = $1::text AND NOT EXISTS (SELECT 1 FROM claimed)`,
			release: `DELETE FROM {T} WHERE message_id = $1 AND state = 'claimed' AND expires_at = $2`,
			seen: `SELECT EXISTS (SELECT 1 FROM {T} WHERE message_id = $1 AND state = 'seen'
    AND (expires_at IS NULL OR expires_at >= {NOW_S}))`,
			remember: `
INSERT INTO {T} (message_id, state, expires_at)
VALUES ($1::text, 'seen', CASE WHEN $2::bigint > 0 THEN {NOW_S} + $2::bigint END)
ON CONFLICT (message_id) DO UPDATE SET state = 'seen', expires_at = EXCLUDED.expires_at`,
			deleteExpired: `DELETE FROM {T} WHERE message_id IN (
    SELECT message_id FROM {T} WHERE expires_at < {NOW_S} LIMIT $1)`,
		}
	} else {
		q = statements{
			claim: `
WITH claimed AS (
    INSERT INTO {T} AS cur (message_id, created_at, expires_at, claim_token)
    VALUES ($1::text, now(), now() + $2::bigint * interval '1 millisecond',
        $3::text || '@' || (extract(epoch FROM now() + $2::bigint * interval '1 millisecond') * 1000000)::bigint)
    ON CONFLICT (message_id) DO UPDATE
        SET created_at = now(), expires_at = EXCLUDED.expires_at, claim_token = EXCLUDED.claim_token
        WHERE cur.expires_at IS NOT NULL AND cur.expires_at <= now()
    RETURNING claim_token
)
SELECT 1, claim_token, NULL::float8 FROM claimed
UNION ALL
SELECT CASE WHEN {IS_CLAIM} THEN 3 ELSE 2 END, NULL, extract(epoch FROM expires_at - now())::float8 FROM {T}
WHERE message_id = $1::text AND NOT EXISTS (SELECT 1 FROM claimed)`,
			release: `DELETE FROM {T} WHERE message_id = $1 AND claim_token = $2`,
			seen: `SELECT EXISTS (SELECT 1 FROM {T} WHERE message_id = $1 AND NOT {IS_CLAIM}
    AND (expires_at IS NULL OR expires_at > now()))`,
			remember: `
INSERT INTO {T} (message_id, created_at, expires_at, claim_token)
VALUES ($1::text, now(), CASE WHEN $2::bigint > 0 THEN now() + $2::bigint * interval '1 millisecond' END, NULL)
ON CONFLICT (message_id) DO UPDATE SET expires_at = EXCLUDED.expires_at, claim_token = NULL`,
			deleteExpired: `DELETE FROM {T} WHERE message_id IN (
    SELECT message_id FROM {T} WHERE expires_at <= now() LIMIT $1)`,
		}
	}
	q.forget = `DELETE FROM {T} WHERE message_id = $1`
	r := strings.NewReplacer("{T}", table, "{NOW_S}", nowSeconds, "{IS_CLAIM}", isClaim)
	for _, p := range []*string{&q.claim, &q.release, &q.seen, &q.remember, &q.forget, &q.deleteExpired} {
		*p = strings.TrimSpace(r.Replace(*p))
	}
	return q
}

// wholeSeconds rounds d up to whole seconds, at least one: the PHP layout's unit.
func wholeSeconds(d time.Duration) int64 {
	return max(int64(math.Ceil(d.Seconds())), 1)
}
