# expect: banned
exec('imp' + 'ort os')
