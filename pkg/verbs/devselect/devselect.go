// Package devselect chooses the verbs provider for a mount: a kernel RDMA
// device through libibverbs (pkg/verbs/ibverbs, build tag ibverbs) when
// one reaches the server, otherwise the pure-Go software iWARP provider
// (pkg/verbs/siw). The choice says which and why, for logs and metrics,
// and can be overridden.
//
// It builds with and without the ibverbs tag (which needs cgo); without it
// the choice is always software iWARP, with the reason "built without the
// ibverbs tag".
package devselect

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs"
	"github.com/nfsrdma/nfsrdma-csi/pkg/verbs/siw"
)

// Providers, as in Choice.Provider and the override.
const (
	ProviderSIW     = "siw"     // pure-Go software iWARP (pkg/verbs/siw)
	ProviderIbverbs = "ibverbs" // a kernel RDMA device through libibverbs
)

// Override values besides a device name.
const (
	OverrideAuto    = "auto"    // same as ""
	OverrideSIW     = "siw"     // always software iWARP
	OverrideIbverbs = "ibverbs" // a kernel device that reaches the server, or an error
)

// Choice is what Select chose and why.
type Choice struct {
	// Provider is ProviderIbverbs or ProviderSIW.
	Provider string
	// Device is the device name ("mlx5_0", "rxe0", "siw0"; "siw0" is also
	// the software provider's default name).
	Device string
	// Transport is the device's wire: "ib", "roce" or "iwarp".
	Transport string
	// Override is the override Select was given ("" for none).
	Override string
	// Reason says why, in a sentence, for logs.
	Reason string
}

func (c Choice) String() string {
	return fmt.Sprintf("%s device %s (%s): %s", c.Provider, c.Device, c.Transport, c.Reason)
}

// Labels are the choice as metric labels: provider, device, transport.
func (c Choice) Labels() map[string]string {
	return map[string]string{"provider": c.Provider, "device": c.Device, "transport": c.Transport}
}

// ErrNotFound: the override names a provider or device that is not
// available or does not reach the server.
var ErrNotFound = errors.New("devselect: requested RDMA device not available")

// DefaultTimeout bounds Select's address resolution.
const DefaultTimeout = 5 * time.Second

// Select chooses the device for a mount of serverAddr ("host" or
// "host:port"; the port does not matter for the choice). override is ""
// or "auto" (a kernel device that rdma_cm resolves the server's address
// on, with an active port, else software iWARP), "siw" (software iWARP),
// "ibverbs" (a kernel device or ErrNotFound) or a kernel device name such
// as "mlx5_0" (that device, or ErrNotFound when it is missing or the
// server is reached through another device). The returned device is new:
// the caller closes it. Each choice is counted (Counts).
func Select(serverAddr, override string) (verbs.Device, Choice, error) {
	return SelectWith(serverAddr, override, siw.Config{})
}

// SelectWith is Select with the configuration of the software iWARP
// device it falls back to (for example siw.Config{NoCRC: true}, the
// nompacrc mount option).
func SelectWith(serverAddr, override string, sc siw.Config) (verbs.Device, Choice, error) {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	override = strings.TrimSpace(override)
	if override == OverrideAuto {
		override = ""
	}
	var ch Choice
	if override == OverrideSIW {
		ch = Choice{Reason: "override " + OverrideSIW}
	} else {
		dev, hc, err := hardware(ctx, serverAddr, override)
		if dev != nil {
			hc.Provider, hc.Override = ProviderIbverbs, override
			count(hc)
			return dev, hc, nil
		}
		if override != "" {
			hc.Override = override
			if err == nil {
				err = fmt.Errorf("%w: %s", ErrNotFound, hc.Reason)
			}
			return nil, hc, err
		}
		ch = hc
	}
	d := siw.NewDevice(sc)
	ch.Provider, ch.Device, ch.Transport, ch.Override = ProviderSIW, d.Name(), d.Transport(), override
	count(ch)
	return d, ch, nil
}

var (
	countMu sync.Mutex
	counts  = map[string]uint64{}
)

func count(c Choice) {
	countMu.Lock()
	counts[c.Provider+"/"+c.Device+"/"+c.Transport]++
	countMu.Unlock()
}

// Count is how many times Select chose one provider/device/transport.
type Count struct {
	Provider, Device, Transport string
	N                           uint64
}

// Counts returns the choices made so far in this process, for a metric
// such as nfsrdma_transport_selections_total{provider,device,transport}.
func Counts() []Count {
	countMu.Lock()
	defer countMu.Unlock()
	out := make([]Count, 0, len(counts))
	for k, n := range counts {
		p := strings.SplitN(k, "/", 3)
		out = append(out, Count{Provider: p[0], Device: p[1], Transport: p[2], N: n})
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Provider+out[i].Device < out[j].Provider+out[j].Device
	})
	return out
}
