-- Which directory a project's path named when it was registered (device and inode):
-- the tools refuse the project once the path leads anywhere else, such as a symbolic
-- link swapped in for the directory. NULL for projects registered before this: their
-- path is still opened with no symbolic link allowed on the way.
ALTER TABLE projects ADD COLUMN dir_dev INTEGER;
ALTER TABLE projects ADD COLUMN dir_ino INTEGER;
