-- After 0038's outbox.append and publish_pending are back, which check the topic's config
-- themselves: nothing calls it.
DROP FUNCTION outbox.check_topic_config(text, integer, text, boolean, integer, boolean, bigint, boolean);
