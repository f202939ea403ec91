-- ARGV: key -> 1 deleted, 0 missing

purge()
local deleted = drop(ARGV[1])
keep_alive()
if deleted then return 1 end
return 0
