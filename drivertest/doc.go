// Package drivertest provides a test kit for a target of one's own: fault
// middleware around any http.Handler, the step rules the engine enforces,
// and a harness that kills a batch and runs it until it completes, as the
// built-in targets are tested.
//
// A target is written against package driver; its test needs a server
// that speaks the repository's protocol (an http.Handler of the test's
// own, however small: package repotest speaks only the built-in
// protocols) and the kit:
//
//   - [Faults.Wrap] puts faults in front of the handler, in the grammar of
//     repotest.FaultsHelp (that of `deposit serve --faults`): an answer
//     lost after the handler ran (drop), a status before it ran (500, 502,
//     503, 504, 409, 429 with Retry-After), a reset, latency, a slow
//     answer. Each request draws its fault from (seed, its class, its key,
//     its attempt), so concurrency does not change which request meets
//     which fault. A read's view lags the writes by [Faults.Lag] through
//     [AsOf], which the handler consults: only the handler holds its
//     earlier state.
//   - [CheckSteps] is the engine's own check of a deposit's steps, and
//     [CheckDriver] runs it on the steps a driver returns for some
//     payloads, with the naming rules of the store rows: a driver's unit
//     test calls it.
//   - [Harness] is the entry point most tests want. Its Run serves the
//     handler behind the faults on 127.0.0.1, runs the batch in child
//     processes (the test binary re-running the calling test, or a
//     Command such as the deposit binary), SIGKILLs the process that sent
//     the chosen writes once they took effect, optionally loses the store
//     after each kill, runs again until the batch completes, checks every
//     store row done (a pending recheck note is searched for by the
//     replay), calls the test's Check (one record per payload), and
//     replays the batch, which must send no request.
//
// A test of a target of one's own, in outline (the Notebook test in this
// package's example_test.go is a whole one):
//
//	func TestMyTarget(t *testing.T) {
//		srv := newMyServer() // an http.Handler that speaks the protocol
//		drivertest.Harness{
//			Handler:  srv,
//			Faults:   drivertest.Faults{Spec: "drop=0.1,503=0.1:retry-after=1", Seed: 1, Lag: 20 * time.Millisecond},
//			Payloads: payloads,
//			Client: func(c drivertest.Child) (client.Config, error) {
//				return client.Config{Target: mytarget.Target{Endpoint: c.Endpoint}}, nil
//			},
//			KillAt: drivertest.RandomKills(1, 2, 50),
//			Check:  func(payloads [][]byte) error { return srv.onePerPayload(payloads) },
//		}.Run(t)
//	}
//
// What it does not do: the middleware buffers each write's answer, and a
// read's that it may drop or trickle (a handler that hijacks the
// connection or streams there is not supported), knows nothing of the protocol (a lag reaches only a handler
// that asks [AsOf]), and counts writes, not steps. The harness kills at
// writes, not at points inside the client (package client's own
// crash-point tests do that), and only on systems with SIGKILL.
package drivertest
