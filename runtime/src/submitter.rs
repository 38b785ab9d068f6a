//! The decode loop's submit thread.
//!
//! On a GPU a decode step costs the host twice: building its graph, then handing its
//! kernels to the device (MLX's `async_eval` encodes them on the calling thread). With
//! one thread the two add up; the submitter does the second on its own thread, so the
//! caller builds step t+1 while step t is submitted. It evaluates each step it is given,
//! then reads that step's token, and the caller takes the tokens in order.
//!
//! Both threads work on the shared stream ([`crate::stream`]): the caller must have
//! called [`crate::stream::share_default`] before building anything it hands over
//! (compiled functions included: a traced function keeps the stream it was traced on).
//! Only the submitter evaluates while it runs; the caller only builds graphs.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::{Scope, ScopedJoinHandle};

use mlx_rs::Array;

use crate::error::{Error, Result};
use crate::stream;

/// A running submit thread, alive for the scope it was started in.
pub struct Submitter<'scope> {
    jobs: Sender<Array>,
    tokens: Receiver<Result<u32>>,
    _thread: ScopedJoinHandle<'scope, ()>,
}

impl<'scope> Submitter<'scope> {
    /// Starts the thread in `scope`. Fails unless the calling thread's default stream is
    /// the shared one.
    pub fn start<'env>(scope: &'scope Scope<'scope, 'env>) -> Result<Self> {
        Self::check_thread()?;
        let (jobs, job_rx) = channel::<Array>();
        let (token_tx, tokens) = channel::<Result<u32>>();
        let thread = scope.spawn(move || serve(job_rx, token_tx));
        Ok(Submitter {
            jobs,
            tokens,
            _thread: thread,
        })
    }

    /// Fails unless the calling thread's default stream is the shared one, which the
    /// submitter needs.
    pub fn check_thread() -> Result<()> {
        if stream::default_is_shared() {
            return Ok(());
        }
        Err(Error::Request(
            "the threaded decode pipeline needs runtime::stream::share_default() on the \
             calling thread before the model's first step"
                .into(),
        ))
    }

    /// Hands over `token`, the not yet evaluated token of a step: the thread evaluates
    /// its graph, then reads it.
    pub fn send(&self, token: &Array) -> Result<()> {
        self.jobs
            .send(token.clone())
            .map_err(|_| Error::Request("the decode submit thread has stopped".into()))
    }

    /// The token of the oldest step handed over and not yet taken; waits for it.
    pub fn token(&self) -> Result<u32> {
        self.tokens
            .recv()
            .map_err(|_| Error::Request("the decode submit thread has stopped".into()))?
    }
}

fn serve(jobs: Receiver<Array>, tokens: Sender<Result<u32>>) {
    let shared = stream::share_default().map_err(|e| e.to_string());
    for token in jobs {
        let read = match &shared {
            Err(why) => Err(Error::Unsupported(why.clone())),
            Ok(()) => evaluate(&token),
        };
        drop(token);
        if tokens.send(read).is_err() {
            break;
        }
    }
}

fn evaluate(token: &Array) -> Result<u32> {
    mlx_rs::transforms::async_eval([token])?;
    crate::generate::read_token(token)
}
