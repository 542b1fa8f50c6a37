"""Runs moto_server with corrections that make it keep what AWS documents
and the sqs:// backend relies on.

1. A lock of each queue around its SQS calls: moto answers requests on
   many threads and its ReceiveMessage takes no lock, so two concurrent receives of a
   queue can both hand out one message, which AWS never does within a
   visibility timeout. A long poll waits without the lock. moto also
   takes the message groups in flight once, when a receive starts, so
   a long poll would not see a group freed by a delete until it ended:
   each pass over the queue here takes them anew. And a long poll on a
   standard queue wakes only for a message sent, so a message whose
   visibility timeout ended waited for the poll to end, where AWS
   returns it at once: the long poll here looks again every 50 ms.
   Messages of a FIFO group whose visibility timeouts ended together
   come back from the group's first, as AWS hands them out: moto handed
   out the last of them first (see receive_pass).
2. A FIFO queue remembers a MessageDeduplicationId for five minutes after
   it accepted the message, also once the message is deleted, as the
   "Exactly-once processing in Amazon SQS" section of the SQS Developer
   Guide states; moto forgets it when the message is deleted.
3. A receive from a FIFO queue repeated with the ReceiveRequestAttemptId
   of an earlier one, within five minutes, gets that receive's messages
   again, with the same receipt handles, their visibility timeout
   started anew, while none of them was deleted or had its visibility
   changed, as the ReceiveMessage page of the SQS API Reference states;
   moto ignores the ID, so a receive repeated because its answer was
   lost got other messages, and the lost answer's messages stayed
   hidden, with their message groups, for a visibility timeout.

It also makes moto's per-request costs fit a test that moves thousands
of messages: a send and a receive read the one queue attribute they
need without counting the queue's messages (moto computes every
attribute, message counts included, several times a message sent or
received); listing a queue's visible messages reads the clock once, not
twice a message; a delete passes over the queue once; the list of
moto's services is read once, not from disk on every request under the
lock that serializes all requests; a receipt handle is drawn in one
call, not one a letter; and no line is logged per request.

Arguments are moto_server's.
"""

import logging
import string
import sys
import threading
import time

from moto import backends
from moto.core.utils import unix_time_millis
from moto.server import main
from moto.sqs import models, responses

DEDUPLICATION_SECONDS = 300
POLL_SECONDS = 0.05

locks = {}
locks_guard = threading.Lock()


def lock_of(queue_name):
    with locks_guard:
        return locks.setdefault(queue_name, threading.RLock())


def locked(call):
    def run(self, queue_name, *args, **kwargs):
        with lock_of(queue_name):
            return call(self, queue_name, *args, **kwargs)

    return run


sending = threading.local()
queue_attributes = models.Queue.attributes


def attributes(self):
    if getattr(sending, "on", False):
        if not self.fifo_queue:
            return {}
        on = bool(getattr(self, "content_based_deduplication", False))
        return {"ContentBasedDeduplication": str(on).lower()}
    return queue_attributes.fget(self)


models.Queue.attributes = property(attributes)


def while_sending(call):
    def run(*args, **kwargs):
        sending.on = True
        try:
            return call(*args, **kwargs)
        finally:
            sending.on = False

    return run


models.SQSBackend.send_message = while_sending(models.SQSBackend.send_message)


def is_message_valid_based_on_retention_period(self, queue_name, message):
    retention = int(self.get_queue(queue_name).message_retention_period)
    return retention + message.sent_timestamp / 1000 > time.time()


models.SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period

for name in (
    "receive_message",
    "send_message",
    "send_message_batch",
    "delete_message",
    "delete_message_batch",
    "change_message_visibility",
    "change_message_visibility_batch",
    "purge_queue",
    "get_queue_attributes",
):
    setattr(models.SQSBackend, name, locked(getattr(models.SQSBackend, name)))


receive_once = models.SQSBackend.receive_message


def receive_pass(self, queue_name, count, visibility_timeout, message_attribute_names):
    # One pass over the queue under its lock. A message whose visibility
    # timeout ended is in flight no more before the pass starts: moto
    # takes it out of flight only when its pass reaches it, while later
    # messages of its group that ended with it still count as in flight,
    # so it skipped a group's first messages and handed out its last one.
    with lock_of(queue_name):
        queue = self.get_queue(queue_name)
        now = unix_time_millis()
        ended = [m for m in queue.pending_messages if now > m.visible_at]
        for m in ended:
            queue.pending_messages.discard(m)
        return receive_once(self, queue_name, count, 0, visibility_timeout, message_attribute_names)


def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
    # Passes over the queue, each with the message groups in flight as
    # they are then, and between passes waits without the lock for a
    # message sent or a short while: for a message whose visibility
    # timeout ends, or, on a FIFO queue, for a message of a group in
    # flight to be deleted.
    end = time.time() + int(wait_seconds_timeout or 0)
    queue = self.get_queue(queue_name)
    attempt = getattr(receiving, "attempt", None) if queue.fifo_queue else None
    if attempt:
        again = receive_again(queue, queue_name, attempt, visibility_timeout)
        if again is not None:
            return again
    while True:
        result = receive_pass(self, queue_name, count, visibility_timeout, message_attribute_names)
        left = end - time.time()
        if result or left <= 0:
            if attempt and result:
                remember_attempt(queue, queue_name, attempt, result)
            return result
        with queue._messages_lock:
            queue._messages_lock.wait(timeout=min(left, POLL_SECONDS))


models.SQSBackend.receive_message = receive_message

ATTEMPT_SECONDS = 300
receiving = threading.local()


def attempts_of(queue):
    # The receives of queue that carried an attempt ID, oldest first:
    # ID -> (when, [(message ID, receipt handle, visible_at, the copy
    # the receive returned)]). moto's receive returns copies of the
    # queue's messages.
    seen = queue.__dict__.setdefault("_bus_attempts", {})
    now = time.time()
    while seen:
        key, (at, _) = next(iter(seen.items()))
        if now - at < ATTEMPT_SECONDS:
            break
        del seen[key]
    return seen


def remember_attempt(queue, queue_name, attempt, copies):
    with lock_of(queue_name):
        attempts_of(queue)[attempt] = (time.time(), [(c.id, c.receipt_handle, c.visible_at, c) for c in copies])


def receive_again(queue, queue_name, attempt, visibility_timeout):
    # The messages of the earlier receive with this attempt ID, when each
    # is still in the queue, in flight, and unchanged since (the same
    # receipt handle and visibility); else None.
    with lock_of(queue_name):
        got = attempts_of(queue).get(attempt)
        if got is None:
            return None
        at, taken = got
        by_id = {m.id: m for m in queue._messages}
        originals = []
        for message_id, handle, visible_at, _ in taken:
            m = by_id.get(message_id)
            if m is None or m.receipt_handle != handle or m.visible_at != visible_at or m not in queue.pending_messages:
                return None
            originals.append(m)
        timeout = visibility_timeout if visibility_timeout is not None else queue.visibility_timeout
        for m in originals:
            m.change_visibility(int(timeout))
        attempts_of(queue)[attempt] = (at, [(m.id, m.receipt_handle, m.visible_at, c) for m, (_, _, _, c) in zip(originals, taken)])
        return [c for _, _, _, c in taken]


response_receive = responses.SQSResponse.receive_message


def receive_with_attempt(self):
    receiving.attempt = self._get_param("ReceiveRequestAttemptId")
    try:
        return response_receive(self)
    finally:
        receiving.attempt = None


responses.SQSResponse.receive_message = receive_with_attempt


add_message = models.Queue.add_message


def add_message_once(self, message):
    if self.fifo_queue and message.deduplication_id:
        # In the order the IDs were accepted: the oldest come first.
        seen = self.__dict__.setdefault("_bus_deduplication", {})
        now = time.time()
        while seen:
            key, accepted = next(iter(seen.items()))
            if now - accepted < DEDUPLICATION_SECONDS:
                break
            del seen[key]
        if message.deduplication_id in seen:
            return
        seen[message.deduplication_id] = now
    add_message(self, message)


models.Queue.add_message = add_message_once


def visible_messages(self):
    # moto's own reads the clock twice a message.
    now = unix_time_millis()
    return [m for m in self._messages if now > m.visible_at and now >= m.delayed_until]


models.Queue.messages = property(visible_messages)


def delete_message(self, receipt_handle):
    # moto's own passes over the queue twice, building a list of each
    # message's receipt handles.
    if receipt_handle in self.deleted_messages:
        return
    for i, message in enumerate(self._messages):
        if message.receipt_handle == receipt_handle or receipt_handle in message._old_receipt_handles:
            self.pending_messages.discard(message)
            self.deleted_messages.update(message.all_receipt_handles)
            self._messages = self._messages[:i] + self._messages[i + 1 :]
            return
    raise models.ReceiptHandleIsInvalid()


models.Queue.delete_message = delete_message


def generate_receipt_handle():
    # moto's own draws its 185 letters one call at a time.
    return "".join(models.random.choices(string.ascii_lowercase, k=185))


models.generate_receipt_handle = generate_receipt_handle

# moto lists its package directory on every request, under the lock
# that serializes all of them; the list never changes while it runs.
moto_modules = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: moto_modules

# One log line a request costs more than most requests; errors are
# still logged.
logging.getLogger("werkzeug").setLevel(logging.WARNING)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
