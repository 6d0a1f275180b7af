// Package statmon is a host's status monitor as its local lock managers
// use it: the server side of NSM version 1 (program 100024 version 1,
// X/Open CAE Specification C702 "Protocols for Interworking: XNFS,
// Version 3W", chapter 11), what Linux rpc.statd serves to the kernel's
// lockd and to user-space lock managers such as NFS-Ganesha's NLM, which
// find it through the host's rpcbind.
//
//   - SM_STAT answers stat_succ with the host's state number.
//   - SM_MON records a monitor: mon_name, my_id (my_name, my_prog,
//     my_vers, my_proc) and the 16 private bytes, and answers stat_succ
//     with the state number. Only NLM (my_prog 100021) may be called
//     back, as rpc.statd allows.
//   - SM_UNMON forgets one monitor, SM_UNMON_ALL those of one my_id; both
//     answer the state number.
//   - SM_SIMU_CRASH moves the state number two on (it stays odd), tells
//     each monitored host (SM_NOTIFY, through that host's rpcbind) and
//     forgets every monitor, as rpc.statd does when it restarts.
//   - SM_NOTIFY from a monitored host (named by mon_name or by the
//     caller's address) with a state not seen before calls each of its
//     monitors back: my_proc of my_prog/my_vers at 127.0.0.1, the port
//     from the local rpcbind (GETPORT over TCP), from a reserved port
//     when the process may bind one (Linux lockd takes the callback only
//     from a privileged loopback port), with nlm.SMStatus: mon_name, the
//     new state, the monitor's private bytes.
//
// SM_MON, SM_UNMON, SM_UNMON_ALL and SM_SIMU_CRASH are taken from
// 127.0.0.1 and ::1 only (rpc.statd's rule against CERT CA-99.05: a
// remote host must not make this host monitor or call anything); others
// get stat_fail with state -1 (SM_MON) or the state number with nothing
// changed. SM_SIMU_CRASH also needs a reserved source port, as rpc.statd
// asks. Arguments that do not decode get GARBAGE_ARGS.
//
// Monitors live in memory: unlike rpc.statd, which records them in
// /var/lib/nfs/statd/sm and notifies the monitored hosts when the host
// comes up again, a restart of the process forgets them.
package statmon
