//! A client's bounded queue of messages: one producer side (the delivery task, through the hub)
//! and one consumer (the client's stream), which takes everything queued at once.
//!
//! Why not tokio's bounded channel: it allocates its first block of 32 slots with the channel
//! (1.6 KiB per client, idle or not), and its permits cost a semaphore round per message. This
//! queue holds nothing until a message arrives, and a stream woken for many messages takes them
//! all in one lock.

use super::Message;
use futures_util::task::AtomicWaker;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

struct State {
    messages: VecDeque<Message>,
    closed: bool,
}

pub(crate) struct Queue {
    state: Mutex<State>,
    /// The stream's task, woken when a message arrives or the queue closes.
    waker: AtomicWaker,
    /// Messages the queue holds at most; one more disconnects the client.
    len_max: usize,
}

/// Why a message was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The client has `len_max` messages it has not taken yet: it is too slow.
    Full,
    /// The client is gone.
    Closed,
}

impl Queue {
    pub(crate) fn new(len_max: usize) -> Arc<Queue> {
        Arc::new(Queue {
            state: Mutex::new(State {
                messages: VecDeque::new(),
                closed: false,
            }),
            waker: AtomicWaker::new(),
            len_max: len_max.max(1),
        })
    }

    /// Queue `m` for the stream, or say why not.
    pub(crate) fn push(&self, m: Message) -> Result<(), Refused> {
        {
            let Ok(mut st) = self.state.lock() else {
                return Err(Refused::Closed);
            };
            if st.closed {
                return Err(Refused::Closed);
            }
            if st.messages.len() >= self.len_max {
                return Err(Refused::Full);
            }
            st.messages.push_back(m);
        }
        self.waker.wake();
        Ok(())
    }

    /// No more messages: the stream ends once it has taken those already queued.
    pub(crate) fn close(&self) {
        if let Ok(mut st) = self.state.lock() {
            st.closed = true;
        }
        self.waker.wake();
    }

    /// Everything queued, in order (appended to `into`); `Ready(false)` once the queue is
    /// closed and empty.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, into: &mut Vec<Message>) -> Poll<bool> {
        // Registered before looking, so a push between the look and the return wakes us.
        self.waker.register(cx.waker());
        let Ok(mut st) = self.state.lock() else {
            return Poll::Ready(false);
        };
        if !st.messages.is_empty() {
            into.extend(st.messages.drain(..));
            // A burst's buffer is not kept by an idle client.
            if st.messages.capacity() > 8 {
                st.messages = VecDeque::new();
            }
            return Poll::Ready(true);
        }
        if st.closed {
            return Poll::Ready(false);
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::task::Waker;

    fn msg(n: u8) -> Message {
        Message {
            name: Arc::from("posts/*"),
            data: Bytes::from(vec![n]),
        }
    }

    fn take(q: &Queue) -> Poll<Vec<u8>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut got = Vec::new();
        match q.poll_take(&mut cx, &mut got) {
            Poll::Ready(true) => Poll::Ready(got.iter().map(|m| m.data[0]).collect()),
            Poll::Ready(false) => Poll::Ready(Vec::new()),
            Poll::Pending => Poll::Pending,
        }
    }

    #[test]
    fn messages_come_out_in_order_and_a_full_queue_refuses() {
        let q = Queue::new(3);
        assert_eq!(take(&q), Poll::Pending);
        for n in 1..=3 {
            assert_eq!(q.push(msg(n)), Ok(()));
        }
        assert_eq!(q.push(msg(4)), Err(Refused::Full));
        assert_eq!(take(&q), Poll::Ready(vec![1, 2, 3]));
        assert_eq!(q.push(msg(5)), Ok(()), "taking makes room");
        q.close();
        assert_eq!(q.push(msg(6)), Err(Refused::Closed));
        assert_eq!(
            take(&q),
            Poll::Ready(vec![5]),
            "what was queued before the close is still taken"
        );
        assert_eq!(take(&q), Poll::Ready(Vec::new()), "then the queue ends");
    }
}
