package redistest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cluster's nodes and slots: which server is a master, a replica or a
// slot's owner, and the migration of a slot between masters.

// NodeID returns the cluster node ID of s, one of c.Nodes.
func (c *Cluster) NodeID(s *Server) string {
	return c.ids[slices.Index(c.Nodes, s)]
}

// Masters returns the nodes that serve slots now, ordered by their
// lowest slot.
func (c *Cluster) Masters(ctx context.Context) ([]*Server, error) {
	slots, err := c.slots(ctx)
	if err != nil {
		return nil, err
	}
	var masters []*Server
	for _, r := range slots {
		if s := c.byID(r.master); s != nil && !slices.Contains(masters, s) {
			masters = append(masters, s)
		}
	}
	return masters, nil
}

// ReplicasOf returns the replicas of master, as master sees them.
func (c *Cluster) ReplicasOf(ctx context.Context, master *Server) ([]*Server, error) {
	nodes, err := clusterNodes(ctx, master)
	if err != nil {
		return nil, err
	}
	id := c.NodeID(master)
	var replicas []*Server
	for _, n := range nodes {
		if n.master == id {
			if s := c.byID(n.id); s != nil {
				replicas = append(replicas, s)
			}
		}
	}
	return replicas, nil
}

// Keyslot returns the slot of key, as CLUSTER KEYSLOT computes it.
func (c *Cluster) Keyslot(ctx context.Context, key string) (int, error) {
	n, err := do(ctx, c.Nodes[0], "cluster", "keyslot", key).Int()
	if err != nil {
		return 0, fmt.Errorf("CLUSTER KEYSLOT %q: %w", key, err)
	}
	return n, nil
}

// SlotOwner returns the master that serves slot, as the first node sees
// it.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) (*Server, error) {
	slots, err := c.slots(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range slots {
		if r.has(slot) {
			if s := c.byID(r.master); s != nil {
				return s, nil
			}
			return nil, fmt.Errorf("slot %d: served by unknown node %s", slot, r.master)
		}
	}
	return nil, fmt.Errorf("slot %d is not served", slot)
}

// KeyOwner returns the master that serves key, as the first node sees it.
func (c *Cluster) KeyOwner(ctx context.Context, key string) (*Server, error) {
	slot, err := c.Keyslot(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.SlotOwner(ctx, slot)
}

// MigrateSlot moves slot, with its keys, from the master that serves it
// to the master to, while the cluster goes on serving it, following the
// steps of the Redis Cluster documentation: the slot is marked IMPORTING
// on to and MIGRATING on its owner, its keys are moved in batches with
// MIGRATE, and then every master is told that to serves it. Between the
// last batch and that announcement it waits for pause, during which a
// client reaches the slot's keys only through ASK redirections. It
// returns once every node agrees that to serves the slot.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to *Server, pause time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, clusterTimeout+pause)
	defer cancel()
	from, err := c.SlotOwner(ctx, slot)
	if err != nil {
		return err
	}
	if from == to {
		return fmt.Errorf("slot %d is already served by %s", slot, to.Addr)
	}
	fromID, toID := c.NodeID(from), c.NodeID(to)
	if err := do(ctx, to, "cluster", "setslot", slot, "importing", fromID).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d IMPORTING on %s: %w", slot, to.Addr, err)
	}
	if err := do(ctx, from, "cluster", "setslot", slot, "migrating", toID).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d MIGRATING on %s: %w", slot, from.Addr, err)
	}
	host, port, err := net.SplitHostPort(to.Addr)
	if err != nil {
		return err
	}
	const batch = 100
	for {
		keys, err := do(ctx, from, "cluster", "getkeysinslot", slot, batch).StringSlice()
		if err != nil {
			return fmt.Errorf("GETKEYSINSLOT %d on %s: %w", slot, from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY means the keys were deleted meanwhile, which is fine.
		if err := do(ctx, from, args...).Err(); err != nil {
			return fmt.Errorf("MIGRATE %d keys of slot %d from %s to %s: %w", len(keys), slot, from.Addr, to.Addr, err)
		}
	}
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return ctx.Err()
	}
	// The documented order: the new owner first, then the old one, so
	// that no node redirects a client to a node that does not yet know
	// it serves the slot (which would send it back).
	masters, err := c.Masters(ctx)
	if err != nil {
		return err
	}
	order := []*Server{to, from}
	for _, m := range masters {
		if m != to && m != from {
			order = append(order, m)
		}
	}
	for _, m := range order {
		if err := do(ctx, m, "cluster", "setslot", slot, "node", toID).Err(); err != nil {
			return fmt.Errorf("SETSLOT %d NODE on %s: %w", slot, m.Addr, err)
		}
	}
	return poll(ctx, fmt.Sprintf("all nodes to agree that %s serves slot %d", to.Addr, slot), func() error {
		for _, s := range c.Nodes {
			slots, err := c.slotsOf(ctx, s)
			if err != nil {
				return err
			}
			owner := ""
			for _, r := range slots {
				if r.has(slot) {
					owner = r.master
				}
			}
			if owner != toID {
				return fmt.Errorf("%s sees slot %d served by %q", s.Addr, slot, owner)
			}
		}
		return nil
	})
}

// A slotRange is a range of slots and the ID of the master serving it.
type slotRange struct {
	start, end int64
	master     string
}

func (r slotRange) has(slot int) bool { return int64(slot) >= r.start && int64(slot) <= r.end }

// slots returns the slot map, ordered by slot, as the first node that
// answers sees it.
func (c *Cluster) slots(ctx context.Context) ([]slotRange, error) {
	var errs []error
	for _, s := range c.Nodes {
		slots, err := c.slotsOf(ctx, s)
		if err == nil {
			return slots, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// slotsOf returns the slot map, ordered by slot, as s sees it.
func (c *Cluster) slotsOf(ctx context.Context, s *Server) ([]slotRange, error) {
	nodes, err := clusterNodes(ctx, s)
	if err != nil {
		return nil, err
	}
	var ranges []slotRange
	for _, n := range nodes {
		for _, r := range n.slots {
			r.master = n.id
			ranges = append(ranges, r)
		}
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return cmp.Compare(a.start, b.start) })
	return ranges, nil
}

// A clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	master string      // the master's ID, for a replica; "" for a master
	slots  []slotRange // the slots a master serves
}

// clusterNodes returns the nodes of the cluster as s sees them, from
// CLUSTER NODES. (CLUSTER SHARDS, in Redis 7.0, shows replicas as shards
// of their own.)
func clusterNodes(ctx context.Context, s *Server) ([]clusterNode, error) {
	text, err := do(ctx, s, "cluster", "nodes").Text()
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
	}
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		// <id> <addr> <flags> <master> <ping-sent> <pong-recv> <epoch> <link> <slot>...
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES on %s: bad line %q", s.Addr, line)
		}
		n := clusterNode{id: f[0]}
		if f[3] != "-" {
			n.master = f[3]
		}
		for _, slot := range f[8:] {
			if strings.HasPrefix(slot, "[") {
				continue // a slot being imported or migrated
			}
			first, last, isRange := strings.Cut(slot, "-")
			if !isRange {
				last = first
			}
			start, err1 := strconv.ParseInt(first, 10, 64)
			end, err2 := strconv.ParseInt(last, 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("CLUSTER NODES on %s: bad slots %q: %w", s.Addr, slot, err)
			}
			n.slots = append(n.slots, slotRange{start: start, end: end})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

func (c *Cluster) byID(id string) *Server {
	if i := slices.Index(c.ids, id); i >= 0 {
		return c.Nodes[i]
	}
	return nil
}

// do sends one command to s on a connection of its own.
func do(ctx context.Context, s *Server, args ...any) *redis.Cmd {
	opt := s.Options()
	opt.PoolSize = 1
	cl := redis.NewClient(opt)
	defer cl.Close()
	return cl.Do(ctx, args...)
}

// poll calls check every 50ms until it returns nil, and returns its last
// error, naming what it waited for, if ctx ends first.
func poll(ctx context.Context, what string, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
