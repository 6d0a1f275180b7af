// Package fusecounters holds the Prometheus collectors of what a FUSE
// mount counts: the memory it holds (fusefs.MemoryStats) and how it gets
// the kernel's requests (fuseuring.Stats), each read as that package's
// own snapshot type at scrape time. It is apart from package counters so
// that the export server, which uses that one, reaches no FUSE code. Its
// tests are package metrics' external tests.
package fusecounters
