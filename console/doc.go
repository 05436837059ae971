// Package console is a web console for the queues of any broker BabelQueue speaks
// to: one page for a polyglot fleet's brokers, queues and dead letters, served from
// the program itself (templates, script and style are embedded; no CDN, it works
// offline).
//
// A [Console] is an [net/http.Handler]. It is given brokers (a transport each, and
// the work queues to show; each queue's dead-letter queue is the one the runtime
// dead-letters to) and shows:
//
//   - the overview: every broker and queue with its depth, the messages in flight
//     and delayed, its dead-letter queue's depth (where the broker can count, see
//     [transport.QueueStatter]) and a chart of the last minutes, from counts the
//     console takes every few seconds;
//   - a dead-letter queue: its messages grouped by reason, URN, producing language,
//     original queue and error fingerprint, with counts, and listed page by page.
//     The console reads the queue in the background with browse pages
//     ([transport.Browser]) into an index that keeps no body, so a queue of any
//     length is grouped and paged on the server and the page answers from the index;
//   - a message: the envelope pretty-printed, its dead_letter block, the raw bytes,
//     the key and the headers;
//   - a redrive of the messages selected, or of every message of a group, with a dry
//     run first and a confirmation, optionally with the replay-bypass header, made
//     by package dlq (every move is a confirmed write, then the acknowledgement);
//   - a deletion of the messages selected, or of every message of a group, with a dry
//     run that counts them by reason and URN and a confirmation naming the count,
//     which bounds it (dlq.Purge: a message deleted is always one selected), and an
//     export of them as a download, the JSON lines of dlq.Export;
//   - a live tail of a queue (server-sent events) and a search by meta.id or
//     trace_id.
//
// # Security
//
// Without [WithToken] or [WithBasicAuth] the console answers loopback clients only,
// and only requests addressed to a loopback name; [Console.ListenAndServe] refuses
// to listen beyond loopback without a login. Every state-changing request needs the
// session's CSRF token and passes Go's cross-origin protection. Broker URLs are shown
// with their passwords redacted. [WithReadOnly] refuses every action and hides it.
// Logins, redrives, deletions and exports are logged with who made them. With
// [WithTLSConfig] (see [LoadTLS]) it serves HTTPS, and the session cookie is Secure.
//
// The babelqueue command serves it: babelqueue console URL#queue,queue....
package console
