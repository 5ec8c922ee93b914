module github.com/locksmith-go/locksmith/bench

go 1.26.0

// redsync v4.18.0 has the same code as v4.18.1, the latest, which differs
// only in requiring go-redis v9.23; v4.18.0 keeps go-redis at v9.22.0, the
// version the library requires, so every library here is measured on the
// go-redis that locksmith users get. redsync >= v4.18 needs Go 1.26.

require (
	github.com/bsm/redislock v0.9.4
	github.com/go-redsync/redsync/v4 v4.18.0
	github.com/google/uuid v1.6.0
	github.com/locksmith-go/locksmith v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redis/rueidis v1.0.79
	golang.org/x/sys v0.47.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
)

replace github.com/locksmith-go/locksmith => ../
