-- tasks_by_topic (tenant, topic, state, available_at) served the poll before 0005's partial
-- indexes. Since then it only tempted the planner into reading every task of a topic, finished
-- ones included, and cost every task update one more index entry (a task changes state on every
-- poll, completion and retry, so no update of it is HOT). Listings by topic or state page by
-- (tenant, id) like every other listing.
DROP INDEX tasks_by_topic;
