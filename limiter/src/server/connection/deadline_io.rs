//! The socket of one connection, with the idle and header deadlines on its reads while no
//! request is served, and the write deadline on its writes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::request::ConnState;
use crate::overload::{Deadline, Overload};

/// The deadlines the socket wrapper keeps.
pub(super) struct Deadlines {
    pub(super) idle: Duration,
    pub(super) header: Duration,
    pub(super) write: Duration,
}

/// The socket, with the idle and header deadlines on its reads while no request is served, and
/// the write deadline on its writes.
pub(super) struct DeadlineIo {
    pub(super) io: TcpStream,
    /// Bytes read to tell the protocol, read again before the socket's.
    pub(super) unread: Bytes,
    pub(super) state: Arc<ConnState>,
    pub(super) overload: Arc<Overload>,
    pub(super) deadlines: Deadlines,
    /// Since when writes have made no progress.
    pub(super) write_stalled: Option<Instant>,
    pub(super) write_timer: Option<Pin<Box<Sleep>>>,
    /// `state.finished` when the current wait began.
    pub(super) wait_of: u64,
    pub(super) wait_started: Instant,
    pub(super) first_byte: Option<Instant>,
    pub(super) timer: Option<Pin<Box<Sleep>>>,
    pub(super) armed: Option<Instant>,
}

impl DeadlineIo {
    pub(super) fn new(
        io: TcpStream,
        state: Arc<ConnState>,
        overload: Arc<Overload>,
        deadlines: Deadlines,
    ) -> Self {
        DeadlineIo {
            io,
            unread: Bytes::new(),
            state,
            overload,
            deadlines,
            write_stalled: None,
            write_timer: None,
            wait_of: 0,
            wait_started: Instant::now(),
            first_byte: None,
            timer: None,
            armed: None,
        }
    }

    /// Gives back bytes already read: the next reads return them first.
    pub(super) fn unread(&mut self, bytes: Bytes) {
        self.unread = bytes;
    }
}

impl AsyncRead for DeadlineIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread.split_to(n));
            return Poll::Ready(Ok(()));
        }
        let waiting = !this.state.busy.load(Ordering::Relaxed);
        if waiting {
            let finished = this.state.finished.load(Ordering::Relaxed);
            if finished != this.wait_of {
                this.wait_of = finished;
                this.wait_started = Instant::now();
                this.first_byte = None;
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(read) => {
                if waiting && this.first_byte.is_none() && buf.filled().len() > before {
                    this.first_byte = Some(Instant::now());
                }
                Poll::Ready(read)
            }
            Poll::Pending if !waiting => Poll::Pending,
            Poll::Pending => {
                let (deadline, kind) = match this.first_byte {
                    Some(first) => (first + this.deadlines.header, Deadline::Header),
                    None => (this.wait_started + this.deadlines.idle, Deadline::Idle),
                };
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if this.armed != Some(deadline) {
                    timer.as_mut().reset(deadline);
                    this.armed = Some(deadline);
                }
                ready!(timer.as_mut().poll(cx));
                this.overload.timed_out(kind);
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} deadline passed", kind.label()),
                )))
            }
        }
    }
}

impl DeadlineIo {
    /// Passes a write's outcome on; a write that stays pending past `http.write_timeout` from
    /// the first time it could not proceed fails instead.
    fn write_deadline<T>(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if written.is_ready() {
            self.write_stalled = None;
            return written;
        }
        let deadline = *self.write_stalled.get_or_insert_with(Instant::now) + self.deadlines.write;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        ready!(timer.as_mut().poll(cx));
        self.overload.timed_out(Deadline::Write);
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "write deadline passed",
        )))
    }
}

impl AsyncWrite for DeadlineIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        this.write_deadline(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.write_deadline(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
