package perftest

import (
	"context"
	"time"
)

// RunClient runs opts.Test against the perftest server at addr ("host:port")
// and, with opts.Baseline, the same byte movement over a raw TCP socket on
// this host's loopback, and reports both.
func RunClient(ctx context.Context, addr string, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	res, err := runRDMA(ctx, addr, opts)
	if err != nil {
		return nil, err
	}
	rep := &Report{RDMA: res}
	if opts.Baseline {
		base, err := runTCP(ctx, opts)
		if err != nil {
			return nil, err
		}
		rep.Baseline = &base
		rep.Ratio = compare(&rep.RDMA, &base)
	}
	return rep, nil
}

// runRDMA runs one test over software iWARP.
func runRDMA(ctx context.Context, addr string, opts Options) (Result, error) {
	res := Result{Test: opts.Test, Transport: "siw", SizeBytes: int64(opts.Size), Iters: opts.Iters,
		Depth: opts.Depth, CRC: !opts.NoCRC, Verified: opts.Verify}
	c, err := dial(ctx, addr, opts)
	if err != nil {
		return res, err
	}
	defer c.close()
	if opts.Test == SendLat {
		rtts := make([]time.Duration, opts.Iters)
		start := time.Now()
		for i := range rtts {
			if rtts[i], err = c.pingPong(ctx); err != nil {
				return res, err
			}
		}
		res.setRate(time.Since(start))
		res.Latency = latency(rtts)
		c.awaitHangup(ctx)
		return res, nil
	}
	start := time.Now()
	if err := c.burst(ctx, opts.Iters); err != nil {
		return res, err
	}
	end := time.Now() // read_bw: the data is here once the last Read completed
	if err := c.finish(ctx); err != nil {
		return res, err
	}
	if opts.Test != ReadBW {
		end = c.ackAt // the data is there once the server saw all of it
	}
	if opts.Test == ReadBW && opts.Verify {
		if err := c.checkSink(); err != nil {
			return res, err
		}
	}
	res.setRate(end.Sub(start))
	return res, nil
}

// RunLoopback runs a server and a client of opts.Test in this process over
// 127.0.0.1 and reports as RunClient.
func RunLoopback(ctx context.Context, opts Options) (*Report, error) {
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv.corruptSink = opts.corruptSink
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx) }()
	defer func() {
		// the run's server end finishes on its own once the client is gone
		_ = srv.Close()
		t := time.NewTimer(hangupGrace)
		defer t.Stop()
		select {
		case <-served:
		case <-t.C:
			stop()
			<-served
		}
		stop()
	}()
	return RunClient(ctx, srv.Addr().String(), opts)
}
