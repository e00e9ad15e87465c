package dedup

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// stallingProxy forwards PostgreSQL connections to upstream until a
// client sends its first query (a Query or a Parse message, once logged
// in), which it swallows, never answering: a server that took the
// connection and then froze.
type stallingProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    []net.Conn
	stalled  chan struct{}
	once     sync.Once
}

func newStallingProxy(t *testing.T, upstream string) *stallingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallingProxy{ln: ln, upstream: upstream, stalled: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *stallingProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go io.Copy(c, up) //nolint:errcheck // ends when either side closes
		go p.forward(up, c)
	}
}

// forward copies the client's messages to the server up to its first
// query. The startup messages have no type byte (an SSL request, then
// the startup packet); every later one has.
func (p *stallingProxy) forward(up, c net.Conn) {
	typed := false
	for {
		var head []byte
		if typed {
			head = make([]byte, 5)
		} else {
			head = make([]byte, 4)
		}
		if _, err := io.ReadFull(c, head); err != nil {
			return
		}
		if typed && (head[0] == 'Q' || head[0] == 'P') {
			p.once.Do(func() { close(p.stalled) })
			return // swallowed: no answer ever comes
		}
		n := int(binary.BigEndian.Uint32(head[len(head)-4:])) - 4
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		if _, err := up.Write(append(head, body...)); err != nil {
			return
		}
		const sslRequest = 80877103
		typed = typed || !(len(body) == 4 && binary.BigEndian.Uint32(body) == sslRequest)
	}
}

func (p *stallingProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// A server that takes the connection, logs the client in and then answers
// nothing no longer holds OpenPostgres forever: it fails after twice
// connect_timeout, saying so, without the password.
func TestPostgresOpenGivesUpOnAServerThatTakesTheConnectionAndAnswersNothing(t *testing.T) {
	raw, _ := pgSchemaURL(t)
	u, err := url.Parse(raw)
	require.NoError(t, err)
	proxy := newStallingProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	q := u.Query()
	q.Set("connect_timeout", "1")
	u.RawQuery = q.Encode()
	password, _ := u.User.Password()

	for _, open := range []func() error{
		func() error { _, err := OpenPostgres(context.Background(), u.String()); return err },
		func() error { _, err := OpenPostgresReadOnly(context.Background(), u.String()); return err },
	} {
		err := open()
		require.Error(t, err)
		require.ErrorIs(t, err, errNoAnswer)
		require.ErrorContains(t, err, "did not answer within 2s")
		require.NotContains(t, err.Error(), password)
	}
	select {
	case <-proxy.stalled:
	default:
		t.Fatal("the proxy never stalled a query: the test did not test the frozen server")
	}
}
