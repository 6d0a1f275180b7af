package metrics

// The test helpers of helpers_test.go, for the external tests (package
// metrics_test) that wire real endpoints through package counters,
// which imports this package.
var (
	ServeReg  = serveReg
	Scrape    = scrape
	Find      = find
	Value     = value
	MustValue = mustValue
	Names     = names
	L         = l
)
