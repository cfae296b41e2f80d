// Package relay forwards the messages of an mqlite queue to an external
// system (a webhook, NATS JetStream, RabbitMQ, Kafka), at least once and with a
// stable message id, so that the far side drops the duplicates.
//
// A Relay runs consumer.LoopBatch over a consumer.Store (the embedded
// *mqlite.Store, or the broker's client) and hands batches of claimed
// messages to a Sink, which reports one Outcome per message:
//
//   - delivered: the message is completed;
//   - retryable, with an optional retry-after: the message is abandoned, to
//     come again after that delay or after Config.Backoff's;
//   - permanent, with a reason: the message is dead-lettered with the reason
//     and the far side's answer as the description.
//
// Lease renewal, backoff, the dead letters after MaxDeliveryCount, panics
// and a clean shutdown come from consumer.LoopBatch.
//
// # Order
//
// Messages of one GroupID go out strictly in order, never two at once: the
// store hands a group's messages out one at a time and holds the next back
// while one is locked or waits for a retry; the Relay also never sends two
// messages of a group at once itself. Messages of different groups, and
// messages without a group, go out in parallel: up to Config.Concurrency
// batches at once, and sinks send the messages of a batch concurrently.
//
// # The stable id
//
// ID(m) is the message's MessageID, or "<queue>:<seq>" when it has none.
// Sinks send it as Standard Webhooks' webhook-id, NATS's Nats-Msg-Id and
// AMQP's message-id. A message delivered twice (its lease ended while the
// far side had it, the relay crashed between the far side's ack and the
// Complete) carries the same id both times.
//
// # Sinks
//
// The sinks live in sub-packages: relay/webhook (signed HTTP POSTs),
// relay/nats (JetStream publishes) and relay/amqp (RabbitMQ with publisher
// confirms), and relay/kafka, a module of its own (franz-go). A sink
// answers Hold for a message the far side has no place for (no stream,
// topic or queue): the relay keeps it, the hold counting no delivery. See
// docs/relay.md for running a relay and for the guarantees.
//
// # Into the file
//
// An Intake is the mirror of a Relay: it takes the messages of a Source
// (relay/nats: a JetStream durable pull consumer; relay/amqp: a RabbitMQ
// queue with manual acks; relay/kafka: a consumer group) into a queue,
// each once by the source's id of it. A batch commits with
// outbox.SendBatch in one transaction, the ids as MessageIDs, and is
// acknowledged only after the commit; a delivery again of a message that
// committed is dropped by the queue's dedup window, which Run checks is
// longer than the source's redelivery plus IntakeConfig.Outage
// (ErrWindowTooShort). A message the queue refuses is held aside in
// IntakeConfig.HoldQueue in the batch's transaction and acknowledged with
// the rest: no message from the far side can stop an intake.
package relay
