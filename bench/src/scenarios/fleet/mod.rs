//! `fleet`: on this one machine, the traffic one Redis shard sees in the fleet model, and what
//! it costs that shard's main thread.
//!
//! The measure is Redis's main-thread CPU (`INFO cpu`, `used_cpu_user_main_thread +
//! used_cpu_sys_main_thread`, network I/O included) as a delta over a phase divided by that
//! phase's operations. The run, in order, all against the same server:
//!
//! 1. **Closed loop**, `--clients` (8) each waiting for its answer, and the baseline the
//!    targets are written against (heartbeat ≤ 0.5×, play-start ≤ 2× a SET):
//!    `redis-benchmark -c 8 -t set` on the same server, then heartbeats, then play-starts,
//!    `--closed-step` each.
//! 2. The server is emptied (when spawned), the open loop's population is loaded (its Redis
//!    memory per stream measured), and an **idle window** measures what the server's main
//!    thread (and the limiters) burn with no traffic; a second one follows the open loop. Their
//!    mean is subtracted from every phase (figures without the subtraction are reported too).
//! 3. **Open loop**: `--players` live leases, each heartbeating on its own jittered schedule
//!    (every `--heartbeat-every` ± 10 %, random phase). `--rounds` rounds, each a window of
//!    heartbeats alone (`--heartbeat-only`) then a mixed window (`--duration`) with play-starts
//!    at `--play-rate` (each a graceful stop of a random player's stream and a new play from a
//!    new device: the population stays constant). The play-start's cost is attributed by
//!    subtraction: the mixed windows' CPU minus their heartbeats at the heartbeat windows' cost
//!    per heartbeat, over the play-starts. By default the rates are the fleet model's per
//!    (limiter process, shard) pair times the limiters spawned, so each limiter's batches are as
//!    deep as a fleet process's would be.
//! 4. Store round trips: PING on a connection of its own under the heartbeat traffic, and the
//!    limiter's own batch cycle (time between batches while its queue never idles, minus W).
//! 5. The **projection** to the seed's peak, printed as a model with its inputs.
//!
//! With `--background-busy F`, a background load (`GET`/`SET bg:<n>` on
//! `--background-connections` connections, one command at a time each, paced at a rate
//! calibrated at the start for a main thread F busy) runs through the open loop and through
//! windows of it alone: before the first round, between rounds (the players hold their
//! heartbeats, and their schedules move on by the pause) and after the last. The open loop's
//! costs are then also reported as **marginal** (each round's window CPU minus the idle's and
//! minus its background operations at what one cost in the background-alone windows either
//! side, over its operations: per background operation, since the background's achieved rate
//! drops while the open loop shares the cores), and the projection uses those: what a shard
//! already busy with other connections pays for this traffic, rather than an idle shard's full
//! wake-up per batch.
//!
//! Batch depth comes from the limiters' `/metrics` (`screenlimit_store_batches_total` and
//! `screenlimit_store_batched_commands_total`, deltas per phase).

mod args;
mod attribution;
mod background;
mod figures;
mod measure;
mod measured;
mod meter;
mod numbers;
mod probes;
mod projection;
mod table;
mod traffic;

use std::time::Duration;

pub use args::{DEFAULT_BATCH_WINDOW, FleetArgs};

use crate::api::Api;
use crate::procs::Stack;
use crate::stats::Report;

pub async fn fleet(
    args: &FleetArgs,
    api: &Api,
    stack: &Stack,
    report: &mut Report,
) -> anyhow::Result<Duration> {
    let m = measure::measure(args, api, stack).await?;
    report.ops.extend(m.ops_out.iter().cloned());
    let costs = attribution::Costs::of(&m);
    let projection = projection::Projection::of(args, &m, &costs);
    figures::record(report, args, &m, &costs, &projection);
    report.text = table::text(args, &m, &costs, &projection);
    Ok(m.measured)
}
