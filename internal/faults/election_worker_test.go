//go:build linux

package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/faults"
)

// The candidates of elections, in the test process, in helper processes
// and in the soak. A term is recorded as a lock's holding is, on the
// election's name: its Campaign as an acquisition (with the term's
// fence), and its window from Campaign's return to the earliest of its
// Deadline, the end of its context (ErrLockLost or ErrResigned) and its
// resignation. So the checker's rules for a lock are the election's: at
// most one window open at any instant (one believed leader), fences
// increasing from term to term, and a leader's fenced write refused only
// once its window is over.

// campaign calls e.Campaign with the tracker's name as the value and
// records it; on success it returns the holding of the term, whose window
// starts now.
func (tr *tracker) campaign(ctx context.Context, e *locksmith.Election) (*holding, error) {
	call := time.Now()
	term, err := e.Campaign(ctx, tr.name)
	ret := time.Now()
	return tr.termStarted(e, call, ret, term, err), err
}

// termStarted records a campaign in e from call to ret that returned term
// and err, and returns the holding of the term when it succeeded.
func (tr *tracker) termStarted(e *locksmith.Election, call, ret time.Time, term *locksmith.Term, err error) *holding {
	var lk *locksmith.Lock
	if term != nil {
		lk = term.Lock
	}
	h := tr.recordObtain(faults.Op{Key: e.Name()}, call, ret, lk, err)
	if h != nil {
		h.term = term
		h.watch(term.Context())
	}
	return h
}

// runTerms calls e.Run until ctx ends, with lead as the leader's work,
// recording each term: as its Campaign call, the time Run began or the
// previous term's work returned (Run campaigns after that, after a pause
// when the term was lost: an early bound, which only widens the call);
// as the start of its window, the time Run called the work, and as its
// end, at the latest, the time the work returned (Run resigns then). It
// returns the number of terms and Run's error.
func (tr *tracker) runTerms(ctx context.Context, e *locksmith.Election, lead func(h *holding, wctx context.Context)) (int, error) {
	terms := 0
	call := time.Now()
	err := e.Run(ctx, tr.name, func(wctx context.Context, term *locksmith.Term) error {
		h := tr.termStarted(e, call, time.Now(), term, nil)
		terms++
		lead(h, wctx)
		call = time.Now()
		h.end(call, "resigned")
		return nil
	})
	return terms, err
}

// leadUntil is a leader's work in a candidate process: it writes to the
// record of the election's name with the term's fence every 10ms, looking
// at wctx before each write, until wctx ends.
func leadUntil(wctx context.Context, h *holding, store writer) {
	for wctx.Err() == nil {
		_, _ = h.write(store)
		select {
		case <-wctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// runCandidate is the life of a candidate process (modeCandidate): until
// it is stopped, it campaigns in the election cfg.Key with cfg.TTL,
// through Run when cfg.Run is set and otherwise through Campaign and
// Resign. Each time it leads, it reports "leading" (its fence and token),
// and writes as leadUntil does until its term ends (then it reports
// "lost", with the cause) or it is stopped; then it resigns.
//
// With cfg.After, it campaigns once, through Campaign, and leads as a
// process paused between its look at the term and its write would: it
// writes on every 10ms, paying no heed to its term, until it has written
// After times after the term's context ended, then reports "done" with
// the context's cause, which must match ErrLockLost, and returns.
func runCandidate(ctx context.Context, cfg helperConfig, l *locksmith.Locker, tr *tracker, out *msgWriter, store writer) error {
	opts := []locksmith.Option{locksmith.WithTTL(cfg.TTL)}
	if cfg.Retry > 0 {
		opts = append(opts, locksmith.WithRetry(locksmith.LinearBackoff(cfg.Retry)))
	}
	e := l.Election(cfg.Key, opts...)
	leading := func(h *holding) {
		out.send(helperMsg{Event: "leading", Detail: fmt.Sprint(h.lk.Fence()), Token: h.lk.Token()})
	}
	resign := func(h *holding) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = tr.release(rctx, h)
	}

	if cfg.After > 0 {
		h, err := tr.campaign(ctx, e)
		if err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
		leading(h)
		tctx := h.term.Context()
		giveUp := time.Now().Add(20 * time.Second)
		for after := 0; after <= cfg.After; {
			if tctx.Err() != nil {
				after++
			}
			if _, err := h.write(store); err != nil {
				return fmt.Errorf("write: %w", err)
			}
			if time.Now().After(giveUp) {
				return errors.New("the term never ended")
			}
			time.Sleep(10 * time.Millisecond)
		}
		h.end(time.Now(), "stopped")
		cause := context.Cause(tctx)
		resign(h)
		out.event("done", fmt.Sprint(cause))
		if !errors.Is(cause, locksmith.ErrLockLost) {
			return fmt.Errorf("the term ended with %v, not ErrLockLost", cause)
		}
		return nil
	}

	lead := func(h *holding, wctx context.Context) {
		leading(h)
		leadUntil(wctx, h, store)
		if ctx.Err() == nil {
			out.event("lost", fmt.Sprint(context.Cause(h.term.Context())))
		}
	}
	if cfg.Run {
		if _, err := tr.runTerms(ctx, e, lead); ctx.Err() == nil {
			return fmt.Errorf("run: %w", err)
		}
		return nil
	}
	for ctx.Err() == nil {
		h, err := tr.campaign(ctx, e)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("campaign: %w", err)
		}
		// The work stops when the term ends or the process is stopped.
		wctx, cancel := context.WithCancel(h.term.Context())
		stop := context.AfterFunc(ctx, cancel)
		lead(h, wctx)
		stop()
		cancel()
		resign(h)
	}
	return nil
}

// electWorker is runWorker for an election (cfg.Elect): until ctx ends,
// it campaigns in the election cfg.Keys[0] with a TTL chosen at random,
// two times in three through Campaign (its wait bounded by 3s) and
// otherwise through Run for one to three seconds. While it leads, it does
// one to six steps of work, each a write with the term's fence after a
// look at the term's context, unless a simulated pause (cfg.PauseChance)
// makes it sleep past the TTL and write regardless, as a paused process
// would; then it resigns. It returns the number of its terms.
func electWorker(ctx context.Context, cfg workerConfig, client *redis.Client, tr *tracker, rnd *rand.Rand, w writer) int {
	l := locksmith.New(client)
	defer l.Close()
	ttls := []time.Duration{300 * time.Millisecond, 500 * time.Millisecond, 800 * time.Millisecond}
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rnd.Int64N(int64(hi-lo+1))) }
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	terms := 0
	for ctx.Err() == nil {
		ttl := ttls[rnd.IntN(len(ttls))]
		e := l.Election(cfg.Keys[0], locksmith.WithTTL(ttl))
		lead := func(h *holding, wctx context.Context) {
			for range 1 + rnd.IntN(6) {
				if rnd.Float64() < cfg.PauseChance {
					if !sleep(between(ttl, 2*ttl)) {
						return
					}
				} else if wctx.Err() != nil {
					return
				}
				_, _ = h.write(w)
				if !sleep(between(5*time.Millisecond, 50*time.Millisecond)) {
					return
				}
			}
		}
		if rnd.IntN(3) == 0 {
			rctx, cancel := context.WithTimeout(ctx, between(time.Second, 3*time.Second))
			n, _ := tr.runTerms(rctx, e, lead)
			cancel()
			terms += n
		} else {
			octx, cancel := context.WithTimeout(ctx, 3*time.Second)
			h, err := tr.campaign(octx, e)
			cancel()
			if err == nil {
				terms++
				lead(h, h.term.Context())
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_ = tr.release(rctx, h)
				cancel()
			}
		}
		sleep(between(time.Millisecond, 30*time.Millisecond))
	}
	return terms
}
