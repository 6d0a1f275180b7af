package perftest

import "context"

// creditBatch is how many reposted receives the server announces in one
// credit message: half the depth, so that at most three credit messages
// are in flight (plus the acknowledgement and the verdict: within the
// client's ctrlRecvSlots).
func (sc *serverConn) creditBatch() int { return max(1, (sc.opts.Depth+1)/2) }

// recvSendBW takes one send_bw message from receive slot: it checks it
// (with Verify), posts the slot again and counts it for the next credit.
func (sc *serverConn) recvSendBW(slot int) error {
	size := int(sc.opts.Size)
	buf := sc.ep.data.Bytes()[slot*size : (slot+1)*size]
	if sc.opts.Verify {
		if sc.corruptSink != nil {
			sc.corruptSink(buf)
		}
		if off := checkPattern(buf, 0); off >= 0 && sc.badMsg < 0 {
			sc.badMsg, sc.badOff = sc.received-1, off
		}
		clear(buf) // a message that does not arrive cannot pass for one that did
	}
	if err := sc.ep.postRecv(slot, slot*size, size); err != nil {
		return err
	}
	sc.pending++
	return nil
}

// serveSendBW serves send_bw: it takes Iters messages into the receives it
// keeps posted and returns credits to the client as it reposts them.
func (sc *serverConn) serveSendBW(ctx context.Context) error {
	iters := sc.opts.Iters
	for sc.received < iters {
		if err := sc.step(ctx); err != nil {
			return err
		}
		if grant := min(sc.pending, iters-sc.granted); grant > 0 &&
			(grant >= sc.creditBatch() || sc.granted+grant == iters) {
			ok, err := sc.ep.trySendCtrl(ctrlMsg{kind: ctrlCredit, value: uint32(grant)})
			if err != nil {
				return err
			}
			if ok { // else a slot frees with a later completion
				sc.granted += grant
				sc.pending -= grant
			}
		}
	}
	var verify func() int
	if sc.opts.Verify {
		verify = func() int {
			if sc.badMsg < 0 {
				return -1
			}
			return sc.badOff
		}
	}
	return sc.conclude(ctx, verify)
}
