-- What a run's arguments must contain for the dashboard's argument filter (%(arg)s: JSON),
-- as a value that `(args || kwargs) @>` tests: the positional arguments followed by the
-- keyword-argument object, as one array. An array filter is matched element by element
-- (`[8]`: an 8 among the positional arguments); any other value is one element
-- (`{"user_id": 42}`: the keyword arguments, or a positional object, hold user_id 42;
-- `"usd"`: a positional argument is "usd"). runs_args_idx indexes that same expression.
CASE WHEN jsonb_typeof(%(arg)s::jsonb) = 'array' THEN %(arg)s::jsonb
     ELSE jsonb_build_array(%(arg)s::jsonb) END
