// The record browser's pages (console.js): where its newest page starts, and whether a page
// has a next one. Apart from the page's drawing so that tests run it under Node.js
// (tests/integration/test_console_pager.py).
"use strict";

const OutboxPager = (() => {
  // How far a read under `isolation` goes (app/storage/read.py, plan_fetch): read_uncommitted to
  // the high watermark, never past it, since a database crash could hand the offsets past it
  // out again (an Ongoing transaction of a producer of durability "commit"); read_committed to
  // the log end, since every commit point it meets is durable, wherever the high watermark is.
  // `partition`: the partition's description (GET /v1/topics/{topic}).
  const end = (partition, isolation) =>
    isolation === "read_committed" ? partition.log_end_offset : partition.high_watermark;

  // The newest page's first offset: `size` offsets before where reads end.
  const newest = (partition, isolation, size) =>
    Math.max(partition.log_start_offset, end(partition, isolation) - size);

  // Whether to offer the page at `page.next_offset`. read_uncommitted: while it is below the
  // high watermark the read answered (a page at or past it would be empty, or offsets a crash
  // may give out again). read_committed: its next_offset may lie past the high watermark, after
  // the durable commit points a page returned, and more may follow up to the log end; a page
  // that found none has read all there is (its next_offset is where the next commit point will
  // be), so it offers none, and a page is never offered twice.
  const hasNext = (page, partition, isolation) =>
    isolation === "read_committed"
      ? page.records.length > 0 && page.next_offset < end(partition, isolation)
      : page.next_offset < page.high_watermark;

  return { end, newest, hasNext };
})();

if (typeof module !== "undefined") module.exports = OutboxPager;
