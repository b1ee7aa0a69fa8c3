package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisStore reads the keys of a Redis database that match a pattern.
//
// Keys are listed with SCAN (COUNT 1000) and their values fetched in one
// pipeline per SCAN batch. SCAN may return a key more than once: the store
// remembers the keys it has returned (keys only, not values) and skips
// repeats. A key that disappears between SCAN and its fetch is skipped, as
// if the scan had not met it.
//
// Values by type:
//
//   - "string": the string as Text, untyped: "10115" is a string or a
//     number by the expected value's type;
//   - "json": the decoded JSON value, numbers as json.Number;
//   - "hash": an object of the hash's fields, each field's string as Text
//     (Redis holds no types in a hash), with the rule on Row: a hash of
//     one field gives that field's value.
type redisStore struct {
	client  *redis.Client
	name    string
	pattern string
	prefix  string
	typ     string
	wmKey   string
}

var _ Store = (*redisStore)(nil)

// redisScanCount is the COUNT hint of each SCAN and so about the size of
// each fetch pipeline.
const redisScanCount = 1000

func openRedis(c RedisConfig) (*redisStore, error) {
	var vals [3]string
	for i, f := range []struct{ what, v string }{{"redis addr", c.Addr}, {"redis username", c.Username}, {"redis password", c.Password}} {
		v, err := expandEnvSet(f.what, f.v)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	addr := vals[0]
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	name := fmt.Sprintf("redis %s/%d", addr, c.DB)
	typ := c.Type
	switch typ {
	case "":
		typ = "json"
	case "json", "hash", "string":
	default:
		return nil, fmt.Errorf("%w: %s: unknown type %q (want hash, json or string)", ErrStore, name, c.Type)
	}
	pattern := c.Pattern
	if pattern == "" {
		pattern = EscapeGlob(c.Prefix) + "*"
	}
	client := redis.NewClient(&redis.Options{
		Addr:            addr,
		DB:              c.DB,
		Username:        vals[1],
		Password:        vals[2],
		DisableIdentity: true,
	})
	return &redisStore{client: client, name: name, pattern: pattern, prefix: c.Prefix, typ: typ, wmKey: c.WatermarkKey}, nil
}

// EscapeGlob quotes the characters SCAN MATCH treats specially.
func EscapeGlob(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *redisStore) Close() error { return s.client.Close() }

func (s *redisStore) Scan(ctx context.Context, fn func(Row) error) error {
	seen := make(map[string]struct{})
	var cursor uint64
	for {
		keys, next, err := s.client.Scan(ctx, cursor, s.pattern, redisScanCount).Result()
		if err != nil {
			return storeError(ctx, s.name, fmt.Errorf("SCAN %d MATCH %q: %w", cursor, s.pattern, err))
		}
		fresh := keys[:0]
		for _, k := range keys {
			if _, dup := seen[k]; !dup {
				seen[k] = struct{}{}
				fresh = append(fresh, k)
			}
		}
		if err := s.fetch(ctx, fresh, fn); err != nil {
			return err
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// fetch reads keys' values with one pipeline and calls fn for each.
func (s *redisStore) fetch(ctx context.Context, keys []string, fn func(Row) error) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]redis.Cmder, len(keys))
	for i, k := range keys {
		if s.typ == "hash" {
			cmds[i] = pipe.HGetAll(ctx, k)
		} else {
			cmds[i] = pipe.Get(ctx, k)
		}
	}
	// Exec's error is the first command's error; each is looked at below.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) && ctx.Err() != nil {
		return ctx.Err()
	}
	for i, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		var value any
		switch cmd := cmds[i].(type) {
		case *redis.MapStringStringCmd:
			h, err := cmd.Result()
			if err != nil {
				return storeError(ctx, s.name, fmt.Errorf("HGETALL %q: %w", k, err))
			}
			if len(h) == 0 {
				continue // deleted since SCAN
			}
			m := make(map[string]any, len(h))
			for f, v := range h {
				m[f] = Text(v)
			}
			value = fieldsValue(m)
		case *redis.StringCmd:
			v, err := cmd.Result()
			if errors.Is(err, redis.Nil) {
				continue // deleted since SCAN
			}
			if err != nil {
				return storeError(ctx, s.name, fmt.Errorf("GET %q: %w", k, err))
			}
			if s.typ == "string" {
				value = Text(v)
			} else if value, err = DecodeJSON([]byte(v)); err != nil {
				return storeError(ctx, s.name, fmt.Errorf("key %q: malformed JSON: %w", k, err))
			}
		}
		if err := fn(Row{Key: strings.TrimPrefix(k, s.prefix), Value: value}); err != nil {
			return err
		}
	}
	return nil
}

// Check sends PING (connecting, authenticating and selecting the
// database), then reads the first key one SCAN call meets, if any, as the
// configured type: a hash read as "json" or malformed JSON is an error
// here.
func (s *redisStore) Check(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return storeError(ctx, s.name, fmt.Errorf("PING: %w", err))
	}
	keys, _, err := s.client.Scan(ctx, 0, s.pattern, redisScanCount).Result()
	if err != nil {
		return storeError(ctx, s.name, fmt.Errorf("SCAN 0 MATCH %q: %w", s.pattern, err))
	}
	if len(keys) == 0 {
		return nil
	}
	return s.fetch(ctx, keys[:1], func(Row) error { return nil })
}

func (s *redisStore) Watermarks(ctx context.Context) (map[string]uint64, bool, error) {
	if s.wmKey == "" {
		return nil, false, nil
	}
	h, err := s.client.HGetAll(ctx, s.wmKey).Result()
	if err != nil {
		return nil, true, storeError(ctx, s.name, fmt.Errorf("watermarks: HGETALL %q: %w", s.wmKey, err))
	}
	marks := make(map[string]uint64, len(h))
	for log, v := range h {
		size, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, true, storeError(ctx, s.name, fmt.Errorf("watermarks: %q field %q: %q is not a tree size", s.wmKey, log, v))
		}
		marks[log] = size
	}
	return marks, true, nil
}
