package lockcb

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// reattachInterval is the pause between attempts to attach again after
// the node's service went away (a restart of the mounter).
const reattachInterval = time.Second

// Handler runs one callback in a mount process (m is a KindCall) and
// returns the Reply's Stat.
type Handler func(m Message) uint32

// Attachment is a mount process's connection to the node's service: it
// announces the process's tag and servers, and runs the callbacks the
// service passes on. It attaches again when the connection ends, until
// Close.
type Attachment struct {
	socket string
	handle Handler

	mu     sync.Mutex
	hello  Message
	conn   *net.UnixConn
	cancel context.CancelFunc
	done   chan struct{}
}

// Attach attaches to the service at socket as the process whose lock
// owners carry tag, and runs handle for each callback passed on. The first
// attempt is made before it returns (bounded by a second); when it fails,
// later ones are made every second in the background.
func Attach(socket, tag string, handle Handler) *Attachment {
	ctx, cancel := context.WithCancel(context.Background())
	a := &Attachment{socket: socket, handle: handle, hello: Message{Kind: KindHello, Tag: tag}, cancel: cancel, done: make(chan struct{})}
	c := a.dial(ctx)
	go a.run(ctx, c)
	return a
}

// SetServers announces the servers the process holds locks on (names and
// addresses; SM_NOTIFY from one of them is passed on to this process).
func (a *Attachment) SetServers(servers []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if slices.Equal(a.hello.Servers, servers) {
		return
	}
	a.hello.Servers = slices.Clone(servers)
	if a.conn != nil {
		a.send(a.conn, a.hello)
	}
}

// Attached reports whether the connection to the service is up.
func (a *Attachment) Attached() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn != nil
}

// Close detaches.
func (a *Attachment) Close() {
	a.cancel()
	a.mu.Lock()
	if a.conn != nil {
		a.conn.Close()
	}
	a.mu.Unlock()
	<-a.done
}

func (a *Attachment) send(c *net.UnixConn, m Message) {
	if err := m.Check(); err != nil {
		klog.ErrorS(err, "lock callbacks: message not sent")
		return
	}
	if _, err := c.Write(m.Marshal()); err != nil {
		klog.V(1).InfoS("lock callbacks: send to the node's service failed", "err", err)
	}
}

// dial connects and sends the hello; nil when the service does not answer.
func (a *Attachment) dial(ctx context.Context) *net.UnixConn {
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "unixpacket", a.socket)
	if err != nil {
		klog.V(1).InfoS("lock callbacks: node's service not reachable; blocked locks complete by re-sending", "socket", a.socket, "err", err)
		return nil
	}
	uc := c.(*net.UnixConn)
	a.mu.Lock()
	a.conn = uc
	a.send(uc, a.hello)
	a.mu.Unlock()
	klog.InfoS("lock callbacks: attached to the node's service", "socket", a.socket, "tag", a.hello.Tag)
	return uc
}

func (a *Attachment) run(ctx context.Context, c *net.UnixConn) {
	defer close(a.done)
	for {
		if c != nil {
			a.serve(c)
			a.mu.Lock()
			a.conn = nil
			a.mu.Unlock()
			c.Close()
		}
		t := time.NewTimer(reattachInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c = a.dial(ctx)
	}
}

// serve runs the callbacks read from c until it fails.
func (a *Attachment) serve(c *net.UnixConn) {
	buf := make([]byte, MaxMessage+1)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		m, err := Decode(buf[:n])
		if err != nil {
			klog.ErrorS(err, "lock callbacks: bad message from the node's service")
			return
		}
		if m.Kind != KindCall {
			continue
		}
		m.Args = append([]byte(nil), m.Args...)
		go func() {
			r := Message{Kind: KindReply, ID: m.ID, Stat: a.handle(m)}
			a.send(c, r)
		}()
	}
}
