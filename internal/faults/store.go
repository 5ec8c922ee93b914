//go:build linux

package faults

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"time"
)

// A Store is a fenced resource: a register per key that accepts a write
// only if its fencing token is at least the highest it has accepted for
// that key, as a database would with a condition on a token column. It
// records every write, with its outcome, timed inside the store's lock.
// A Store is safe for concurrent use.
type Store struct {
	clock Clock
	rec   Recorder

	mu      sync.Mutex       // guards highest, and orders the writes
	highest map[string]int64 // by key
}

// NewStore returns an empty store that records its writes to rec, timed by
// clock.
func NewStore(clock Clock, rec Recorder) *Store {
	return &Store{clock: clock, rec: rec, highest: make(map[string]int64)}
}

// Write writes to key on behalf of holder, who holds the lock key with
// fence, and reports whether the store accepted it. The error is always
// nil: Store satisfies the same interface as RemoteStore.
func (s *Store) Write(key, holder string, fence int64) (bool, error) {
	return s.WriteRecord(key, "", holder, fence)
}

// WriteRecord writes to record on behalf of holder, who holds the lock or
// a permit of the semaphore under with fence (under "" means record
// itself), and reports whether the store accepted it. A semaphore's
// holders claim records of their own, such as a job each: the record
// keeps the fence of the permit that wrote it last, and refuses the
// writes of a holder whose job another has claimed since. The error is
// always nil.
func (s *Store) WriteRecord(record, under, holder string, fence int64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	call := s.clock.Now()
	accepted := fence >= s.highest[record]
	outcome := OutcomeRejected
	if accepted {
		s.highest[record] = fence
		outcome = OutcomeAccepted
	}
	if under == record {
		under = ""
	}
	s.rec.Record(Op{Kind: KindWrite, Key: record, Under: under, Holder: holder, Fence: fence,
		Call: call, Return: s.clock.Now(), Outcome: outcome})
	return accepted, nil
}

// writeRequest and writeReply are the wire format of a StoreServer: one
// JSON object a line each way.
type (
	writeRequest struct {
		Key    string `json:"key"`
		Under  string `json:"under,omitempty"`
		Holder string `json:"holder"`
		Fence  int64  `json:"fence"`
	}
	writeReply struct {
		Accepted bool `json:"accepted"`
	}
)

// A StoreServer serves a Store on a loopback port, for helper processes.
type StoreServer struct {
	store *Store
	ln    net.Listener
	wg    sync.WaitGroup

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

// Serve starts serving s on a free loopback port.
func (s *Store) Serve() (*StoreServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &StoreServer{store: s, ln: ln, conns: make(map[net.Conn]struct{})}
	srv.wg.Add(1)
	go srv.accept()
	return srv, nil
}

// Addr returns the address to give DialStore.
func (srv *StoreServer) Addr() string { return srv.ln.Addr().String() }

// Close stops the server, closes its connections and waits for its
// goroutines.
func (srv *StoreServer) Close() error {
	err := srv.ln.Close()
	srv.mu.Lock()
	srv.closed = true
	for c := range srv.conns {
		_ = c.Close()
	}
	srv.mu.Unlock()
	srv.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (srv *StoreServer) accept() {
	defer srv.wg.Done()
	for {
		c, err := srv.ln.Accept()
		if err != nil {
			return
		}
		srv.mu.Lock()
		if srv.closed {
			srv.mu.Unlock()
			_ = c.Close()
			return
		}
		srv.conns[c] = struct{}{}
		srv.wg.Add(1)
		srv.mu.Unlock()
		go srv.serve(c)
	}
}

func (srv *StoreServer) serve(c net.Conn) {
	defer srv.wg.Done()
	defer func() {
		srv.mu.Lock()
		delete(srv.conns, c)
		srv.mu.Unlock()
		_ = c.Close()
	}()
	dec := json.NewDecoder(bufio.NewReader(c))
	enc := json.NewEncoder(c)
	for {
		var req writeRequest
		if err := dec.Decode(&req); err != nil {
			return
		}
		accepted, _ := srv.store.WriteRecord(req.Key, req.Under, req.Holder, req.Fence)
		if err := enc.Encode(writeReply{Accepted: accepted}); err != nil {
			return
		}
	}
}

// A RemoteStore writes to a Store through its StoreServer. It is not safe
// for concurrent use.
type RemoteStore struct {
	conn net.Conn
	dec  *json.Decoder
	enc  *json.Encoder
}

// DialStore connects to the StoreServer at addr.
func DialStore(addr string) (*RemoteStore, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &RemoteStore{conn: c, dec: json.NewDecoder(bufio.NewReader(c)), enc: json.NewEncoder(c)}, nil
}

// Write is Store.Write, over the connection; an error means the store may
// or may not have seen the write.
func (r *RemoteStore) Write(key, holder string, fence int64) (bool, error) {
	return r.WriteRecord(key, "", holder, fence)
}

// WriteRecord is Store.WriteRecord, over the connection; an error means
// the store may or may not have seen the write.
func (r *RemoteStore) WriteRecord(record, under, holder string, fence int64) (bool, error) {
	_ = r.conn.SetDeadline(time.Now().Add(5 * time.Second))
	if err := r.enc.Encode(writeRequest{Key: record, Under: under, Holder: holder, Fence: fence}); err != nil {
		return false, err
	}
	var rep writeReply
	if err := r.dec.Decode(&rep); err != nil {
		return false, err
	}
	return rep.Accepted, nil
}

// Close closes the connection.
func (r *RemoteStore) Close() error { return r.conn.Close() }
