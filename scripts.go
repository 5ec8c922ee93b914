package locksmith

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts run with EVALSHA, falling back to EVAL when the server
// answers NOSCRIPT (its script cache was flushed, or it is a new primary
// after a failover), so callers never see that error. Each script touches
// exactly one key, passed in KEYS, so it runs on Redis Cluster too.
var (
	//go:embed obtain.lua
	obtainSrc    string
	obtainScript = redis.NewScript(obtainSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed refresh.lua
	refreshSrc    string
	refreshScript = redis.NewScript(refreshSrc)

	//go:embed pttl.lua
	pttlSrc    string
	pttlScript = redis.NewScript(pttlSrc)
)

// pttlNotHeld is what pttl.lua returns when the caller does not hold the lock.
const pttlNotHeld = -3
