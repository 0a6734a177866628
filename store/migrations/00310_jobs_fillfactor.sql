-- A scheduling cycle rewrites the explanation of every waiting job whose
-- explanation changed or came due (docs/design.md §8, "The whole cycle"):
-- thousands of jobs rows a cycle at 100,000 pending jobs. None of those
-- updates changes an indexed column, so with free room on the row's page
-- PostgreSQL can make it a heap-only (HOT) update that writes none of
-- jobs' seven indexes; at the default fillfactor (100) pages are full and
-- nearly every rewrite also inserts into every index. 80 leaves a fifth of
-- each page for the new versions. It applies to pages written from now on
-- (a VACUUM FULL or pg_repack would apply it to existing ones).

-- +goose Up
ALTER TABLE jobs SET (fillfactor = 80);

-- +goose Down
ALTER TABLE jobs RESET (fillfactor);
