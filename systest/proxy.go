// Package systest holds Stampede's system tests: each runs the real binary
// (`stampede serve`, one or many processes) against real services and ends
// with the docs/spec.md §5 check (pipeline.WaitIdle, then pipeline.Reconcile).
//
// The fault-injection tests (TestFault*, issue 4, docs/spec.md §6) inject one real
// fault each — a broker or database cut off, a Redis restart, a process
// killed with SIGKILL. The scale-out tests (issue 8) run every role as
// several processes, on a real Redis Cluster and on quorum queues.
//
// The only non-test code is Proxy, a loopback TCP proxy put between the
// processes under test and a shared service, so a test can cut or refuse
// connections to that service without touching the service itself, which
// other tests use at the same time. It must never be used in production.
package systest

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards every connection accepted on a loopback port to Target.
// Down closes every open connection and refuses new ones (they are accepted
// and reset at once) until Up; Cut closes every open connection and keeps
// accepting.
type Proxy struct {
	Target string

	ln       net.Listener
	mu       sync.Mutex
	down     bool
	conns    map[net.Conn]struct{}
	accepted atomic.Int64 // connections forwarded
	refused  atomic.Int64 // connections reset while down
	wg       sync.WaitGroup
}

// NewProxy listens on 127.0.0.1 at a free port and forwards to target.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted is the number of connections forwarded so far.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Refused is the number of connections reset while the proxy was down.
func (p *Proxy) Refused() int64 { return p.refused.Load() }

// Down closes every connection and refuses new ones until Up.
func (p *Proxy) Down() {
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	p.Cut()
}

// Up accepts connections again.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// Cut closes (resets) every open connection; new ones are accepted as
// before. It returns how many were closed.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		reset(c)
		delete(p.conns, c)
		n++
	}
	return n
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0) // RST, as a crashed peer would
	}
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			p.refused.Add(1)
			reset(c)
			continue
		}
		go p.forward(c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.Dial("tcp", p.Target)
	if err != nil {
		reset(client)
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		reset(client)
		reset(server)
		return
	}
	p.conns[client] = struct{}{}
	p.conns[server] = struct{}{}
	p.mu.Unlock()
	p.accepted.Add(1)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	// One side ended: end both, so the peer sees the cut.
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, server)
	p.mu.Unlock()
	client.Close()
	server.Close()
	<-done
}
