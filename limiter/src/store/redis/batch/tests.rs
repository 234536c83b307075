//! Unit tests of the shard queue (`batch.rs`): who leads a batch, its size, admission, what is
//! not sent, and overload episodes.

use super::*;

const LATER: Duration = Duration::from_secs(60);

/// A job whose caller keeps waiting (its receiver is kept alive for the test's life).
fn job(key: &str) -> Job {
    let (job, reply) = job_until(key, Instant::now() + LATER);
    std::mem::forget(reply);
    job
}

fn job_until(key: &str, until: Instant) -> (Job, oneshot::Receiver<Result<Value, StoreError>>) {
    let (answer, reply) = oneshot::channel();
    let job = Job {
        command: redis::cmd("GET").arg(key).clone(),
        answer,
        until,
        priority: Priority::Decision,
        renewal: None,
    };
    (job, reply)
}

fn keys(jobs: &[Job]) -> Vec<String> {
    jobs.iter()
        .map(|j| String::from_utf8_lossy(&j.command.get_packed_command()).into_owned())
        .map(|packed| packed.rsplit("\r\n").nth(1).unwrap_or_default().to_owned())
        .collect()
}

fn push(queue: &ShardQueue, job: Job, targets: Option<&Targets>) -> &'static str {
    match queue.push(job, targets) {
        Pushed::Lead => "lead",
        Pushed::Wait => "wait",
        Pushed::Shed(_) => "shed",
    }
}

/// A queue whose shard was seen to answer 100 µs a command.
fn paced(queue: &ShardQueue) {
    queue.finish_batch(Some((100, Duration::from_millis(10))));
}

#[test]
fn the_first_command_leads_and_later_ones_wait_for_the_next_batch() {
    let queue = ShardQueue::default();
    assert_eq!(
        push(&queue, job("a"), None),
        "lead",
        "an idle queue: send at once"
    );
    assert_eq!(queue.take_batch(None).jobs.len(), 1);
    assert_eq!(push(&queue, job("b"), None), "wait", "a batch is in flight");
    assert_eq!(push(&queue, job("c"), None), "wait");
    assert!(queue.finish_batch(None), "two wait: the next batch must go");
    assert_eq!(keys(&queue.take_batch(None).jobs), ["b", "c"]);
    assert!(!queue.finish_batch(None), "nothing waits: idle");
    assert_eq!(
        push(&queue, job("d"), None),
        "lead",
        "idle again: send at once"
    );
    assert_eq!(queue.totals(), (2, 3), "two batches, three commands");
}

#[test]
fn a_batch_holds_at_most_max_batch_commands() {
    let queue = ShardQueue::default();
    for i in 0..MAX_BATCH + 5 {
        push(&queue, job(&i.to_string()), None);
    }
    assert_eq!(queue.take_batch(None).jobs.len(), MAX_BATCH);
    assert!(queue.finish_batch(None));
    assert_eq!(queue.take_batch(None).jobs.len(), 5);
    assert!(!queue.finish_batch(None));
}

#[test]
fn beyond_what_the_shard_drains_in_time_a_command_is_refused_at_once() {
    let targets = Targets::for_deadline(Duration::from_millis(20));
    let queue = ShardQueue::default();
    for i in 0..500 {
        assert_ne!(
            push(&queue, job(&i.to_string()), Some(&targets)),
            "shed",
            "no pace yet: no bound"
        );
    }
    let queue = ShardQueue::default();
    paced(&queue);
    // 100 µs a command, 10 ms for a decision: 100 may be ahead of it.
    let admitted = (0..150)
        .filter(|i| push(&queue, job(&i.to_string()), Some(&targets)) != "shed")
        .count();
    assert_eq!(admitted, 100);
    // A renewal is shed first: half the bound, 50 ahead.
    let renewal = Job {
        priority: Priority::Renewal,
        ..job("r")
    };
    assert!(matches!(
        queue.push(renewal, Some(&targets)),
        Pushed::Shed(_)
    ));
    let admission = queue.admission(Some(&targets));
    assert_eq!((admission.queued, admission.bound), (100, Some(100)));
    assert_eq!(admission.shed[0][0], 50, "decisions refused for the bound");
    assert_eq!(admission.shed[1][0], 1, "the renewal");
    // Off: nothing is refused.
    assert_eq!(push(&queue, job("x"), None), "wait");
}

#[test]
fn commands_nobody_waits_for_or_that_would_be_late_are_not_sent() {
    let targets = Targets::for_deadline(Duration::from_millis(20));
    let queue = ShardQueue::default();
    // A slow shard: 1 ms a command.
    queue.finish_batch(Some((100, Duration::from_millis(100))));
    let now = Instant::now();
    let (gone, reply) = job_until("gone", now + LATER);
    drop(reply);
    push(&queue, gone, Some(&targets));
    push(&queue, job_until("expired", now).0, Some(&targets));
    // Answered in about 19 × 1 ms: one whose caller waits 10 ms more would be late.
    let (late, _late_reply) = job_until("late", now + Duration::from_millis(10));
    push(&queue, late, Some(&targets));
    for i in 0..MIN_SAMPLE {
        push(&queue, job(&format!("on-time-{i}")), Some(&targets));
    }
    let batch = queue.take_batch(Some(&targets));
    assert_eq!(batch.jobs.len(), MIN_SAMPLE);
    assert!(keys(&batch.jobs).iter().all(|k| k.starts_with("on-time")));
    assert_eq!(keys(&batch.dropped), ["gone", "expired", "late"]);
    let shed = queue.admission(Some(&targets)).shed[0];
    assert_eq!(shed, [0, 1, 2], "bound, late, abandoned");
    assert_eq!(
        queue.totals(),
        (1, MIN_SAMPLE as u64),
        "only what was sent is counted as sent"
    );
}

#[test]
fn a_pace_that_calls_everything_late_still_sends_a_sample_and_learns_it_was_wrong() {
    let deadline = Duration::from_millis(25);
    let targets = Targets::for_deadline(deadline);
    let queue = ShardQueue::default();
    // One stalled batch under a CPU quota: 20 ms for 16 commands, 1.25 ms a command, so a batch
    // of the floor's 32 looks like 40 ms, past every caller's deadline.
    queue.finish_batch(Some((MIN_SAMPLE, Duration::from_millis(20))));
    let mut replies = Vec::new();
    for round in 0..40 {
        let now = Instant::now();
        for i in 0..2 * MIN_SAMPLE {
            let (job, reply) = job_until(
                &format!("{round}-{i}"),
                now + deadline - Duration::from_millis(i as u64 / 8),
            );
            replies.push(reply);
            push(&queue, job, Some(&targets));
        }
        let batch = queue.take_batch(Some(&targets));
        assert!(
            batch.jobs.len() >= MIN_SAMPLE,
            "round {round}: a sample goes whatever the pace says ({} sent)",
            batch.jobs.len()
        );
        // The shard in fact answers a batch in 2 ms.
        queue.finish_batch(Some((batch.jobs.len(), Duration::from_millis(2))));
    }
    let learnt = queue.admission(Some(&targets)).per_command.unwrap();
    assert!(
        learnt < Duration::from_micros(200),
        "the pace follows what the samples show: {learnt:?}"
    );
    let last = queue.take_batch(Some(&targets));
    assert!(last.dropped.is_empty(), "nothing is called late any more");
}

#[test]
fn an_episode_starts_with_the_first_shed_and_ends_after_quiet_ticks() {
    let targets = Targets::for_deadline(Duration::from_millis(20));
    let queue = ShardQueue::default();
    paced(&queue);
    assert_eq!(queue.tick(), None);
    for i in 0..200 {
        push(&queue, job(&i.to_string()), Some(&targets));
    }
    assert_eq!(queue.tick(), Some(Episode::Started));
    assert!(queue.admission(Some(&targets)).overloaded);
    push(&queue, job("more"), Some(&targets));
    assert_eq!(queue.tick(), None, "still shedding: no new line");
    assert_eq!(queue.tick(), None);
    assert_eq!(queue.tick(), None);
    assert!(matches!(queue.tick(), Some(Episode::Ended { .. })));
    assert!(!queue.admission(Some(&targets)).overloaded);
    assert_eq!(queue.tick(), None);
}
