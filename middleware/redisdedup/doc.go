// Package redisdedup is a Redis store for middleware.Dedup, shared by every
// process that uses the same Redis and key prefix.
//
// It lives in its own package so that importing middleware does not pull
// in go-redis: only programs that choose this store compile it.
//
//	store := redisdedup.New(client, "orders:dedup:")
//	sub, err := b.Subscribe(ctx, "orders", h, bus.WithMiddleware(middleware.Dedup(store)))
package redisdedup
