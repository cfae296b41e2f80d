// Package watermill is a Watermill Pub/Sub over mqlite: Watermill's Router,
// middlewares (retry, poison queue, correlation), CQRS and Forwarder run on
// top of the single-file outbox and queue.
//
// A topic is an mqlite queue, or with consumer groups an mqlite topic (see
// Features). NewPublisher sends over a Store, one
// transaction per Publish; NewTxPublisher writes into the caller's own
// transaction, so an event commits with the business rows that caused it,
// or not at all. NewSubscriber consumes a queue with peek-lock delivery
// through consumer.Loop: Ack completes the message, Nack abandons it for a
// redelivery, the lease is renewed while the message is out, and Close gives
// back what the subscriptions hold.
//
//	st, _ := mqlite.Open(ctx, "app.db", mqlite.Config{})
//	sub, _ := watermill.NewSubscriber(st, watermill.SubscriberConfig{AutoCreateQueues: true})
//	err := st.Tx(ctx, func(tx *mqlite.Tx) error {
//		// ... INSERT INTO orders ... on tx.SQL()
//		pub, err := watermill.NewTxPublisher(tx.SQL(), watermill.PublisherConfig{})
//		if err != nil {
//			return err
//		}
//		return pub.Publish("orders", message.NewMessage(eventID, payload))
//	})
//
// # Mapping
//
// Publish: the message's UUID is the MessageID, its payload the Body, its
// metadata the Properties, and PublisherConfig.GroupIDFunc gives the GroupID.
// Subscribe: the reverse; a message sent without a MessageID (by
// outbox.SendOne directly) gets the UUID "<queue>:<seq>".
//
// # Features
//
// What this Pub/Sub guarantees, as Watermill's universal test suite
// (pubsub/tests.Features) declares it, each with its reason:
//
//   - Persistent: yes. Messages are rows of the SQLite file, committed
//     before Publish returns; they outlive the Publisher, the Subscriber,
//     the Store and the process.
//   - At-least-once delivery: yes; ExactlyOnceDelivery: no. A message is
//     deleted only by Ack. A delivery whose lease ends without an Ack (the
//     process crashed, the lease could not be renewed, the subscription
//     closed before the Ack) is delivered again, so a handler can see a
//     message twice: make handlers idempotent.
//   - Redelivery on Nack and on crash: yes. Nack abandons the message; it is
//     claimable again after SubscriberConfig.NackBackoff (no delay by
//     default). A crashed process's leases are released when the file is
//     opened again, or when they end. Each delivery counts against the
//     queue's MaxDeliveryCount: past it the message is dead-lettered
//     (mqlite's dead letters; Watermill's poison-queue middleware can take
//     it earlier).
//   - Ordering within a GroupID: yes. Messages with the same GroupID (set by
//     PublisherConfig.GroupIDFunc) are handed out one at a time, in the order
//     they were published: the next waits until the previous is acked, or
//     nacked and redelivered first. On a FIFO queue
//     (mqlite.QueueOptions.Ordering) every message is in one group, so the
//     whole queue is ordered. GuaranteedOrder is declared for FIFO queues
//     only: on a Standard queue, messages without a group go to concurrent
//     subscriptions at once, and a Nack puts a message behind the ones
//     already claimed ahead (Prefetch), so their order is not kept.
//   - Consumer groups and fan-out: yes, with SubscriberConfig.ConsumerGroup.
//     Without it a topic is one queue and each message goes to exactly one
//     subscription (competing consumers). With it a topic is an mqlite topic
//     (Store.CreateTopic) and each group reads its own subscription, the
//     queue "<topic>:<group>": every group gets each message once, and the
//     members of one group compete for their group's copy. A group gets what
//     is published after its subscription exists (SubscribeInitialize or
//     AutoCreateQueues creates it), not what came before.
//   - New subscribers do not receive old messages: an acked message is
//     deleted, it is a queue and not a log.
//   - The message's context is not preserved: contexts are not data, and
//     are not stored. A received message's context carries the values of
//     the ctx given to Subscribe instead.
//
// # Concurrency and shutdown
//
// Publisher and Subscriber are safe for concurrent use. Every goroutine a
// Subscriber starts belongs to a subscription and stops when its Subscribe
// ctx is cancelled or the Subscriber is closed; Close waits for them. Neither
// closes the Store.
//
// # Dead letters and redrive
//
// A message nacked on its queue's last allowed delivery goes to mqlite's
// dead letters, where Store.PeekDeadLetters shows it and Store.Redrive
// brings it back.
package watermill
