# expect: banned
# runtime: banned
match ():
    case object(__class__=t):
        pass
match t:
    case object(__base__=o):
        pass
match o:
    case object(__subclasses__=subclasses):
        pass
for c in subclasses():
    match c:
        case object(__name__='_wrap_close', __init__=init):
            match init:
                case object(__globals__=g):
                    g['system']('echo pwned > /tmp/evolora-pwned')
