// Package lockd is the lock manager of the export server: the NLM v4
// (program 100021) and NSM v1 (program 100024) services that make POSIX
// byte-range locks (fcntl F_SETLK/F_SETLKW/F_GETLK, and flock mapped onto
// whole-file ranges by clients) coherent between every NFS client of the
// server, and survive a restart of either side (X/Open XNFS chapters 11
// and 14; Linux fs/lockd and rpc.statd as the reference behaviour).
//
// Locks are kept per file (a key from the NFS file handle) and per owner
// (caller_name, oh, svid). A blocking LOCK that conflicts is answered
// NLM4_BLOCKED and queued; when it can be granted, the lock is taken for
// the client and an NLM GRANTED call is made to the client's NLM service,
// found through rpcbind on the client's address. Until the client
// answers, the lock stays held and the call is repeated; a re-sent LOCK
// is answered NLM4_GRANTED.
//
// Every client that locks is recorded (StateDir/clients.json) before its
// first lock is granted. After a restart the state number (StateDir/state)
// is bumped by 2, each recorded client's NSM is sent SM_NOTIFY, and a
// grace period opens in which only reclaims are granted. An SM_NOTIFY
// received from a client releases all its locks.
package lockd
