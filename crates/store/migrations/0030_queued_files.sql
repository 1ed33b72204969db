-- Files in queued prompts and steers (issue 42): the files a prompt or steer was sent
-- with, bound to the session when it was queued, as a JSON array of attachments
-- (`{id, name, mediaType, size, sha256, url}`). The run that takes the message puts
-- them in its user message before the text. NULL: a message with none (every row
-- queued before this).
ALTER TABLE queued_messages ADD COLUMN files TEXT CHECK (files IS NULL OR json_valid(files));
